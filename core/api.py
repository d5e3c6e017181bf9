"""``torchkiln.compile``: argument checks, mode -> options, function and Module wrapping.

Everything about the arguments is checked here, when ``compile`` is called,
before anything is captured: unknown backends, unusable backends, bad modes
and options fail at once with a message that says what to do. The result
of the checks is a :class:`GraphCompiler`, the one callable the capture
core hands every captured graph to.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from torchkiln import config
from torchkiln.chain import BackendChain, Link
from torchkiln.compiled_module import CompiledModule
from torchkiln.disk_cache import Uncacheable, stable_name
from torchkiln.distributed import CompiledDDP, bucketed, is_ddp
from torchkiln.exc import (
    BackendCompilerFailed,
    InvalidBackendChain,
    InvalidOptionError,
    NeedsStaticShapes,
)
from torchkiln.options import check_options, did_you_mean, option_mapping
from torchkiln.plugin import MODE_DESCRIPTIONS, MODES, Backend
from torchkiln.registry import (
    ensure_usable,
    lookup_backend,
    lookup_runtime_wrapper,
    runtime_wrappers_for_mode,
)
from torchkiln.runtime_wrappers import AppliedWrappers, compile_wrapped
from torchkiln.static_shapes import PerSizeCompiled, has_symbolic_inputs

log = logging.getLogger("torchkiln")


@dataclass
class GraphCompiler:
    """A backend bound to its options: ``(gm, example_inputs) -> callable``.

    Errors raised by the backend become ``BackendCompilerFailed`` naming the
    backend and the graph, or, with ``config.suppress_errors``, a logged
    fallback that runs the graph eagerly.

    ``runtime_wrappers`` name the wrappers (CUDA graphs, say) applied around
    every graph the backend compiles; their state is shared by those graphs
    (and by other compile calls with equal settings, which share captures too).

    ``static_shapes``: the backend takes no symbolic sizes (``Backend.dynamic_shapes``);
    a graph with symbolic inputs is compiled once per concrete size (``static_shapes``), as
    is one whose backend raised ``NeedsStaticShapes``. ``data_dependent_sizes``: it takes
    sizes only the data gives (``Backend.data_dependent_sizes``); else graphs break there.
    """

    name: str
    compile_fn: Callable[..., Callable]
    options: dict[str, Any] = field(default_factory=dict)
    runtime_wrappers: tuple[str, ...] = ()
    applied: AppliedWrappers | None = field(default=None, compare=False, repr=False)
    static_shapes: bool = False
    data_dependent_sizes: bool = True
    prepare: Callable[[set[torch.device]], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.runtime_wrappers and self.applied is None:
            self.applied = AppliedWrappers(
                [lookup_runtime_wrapper(name) for name in self.runtime_wrappers]
            )

    def before_capture(self, args: tuple) -> None:
        """A frame called with ``args`` is about to be captured: the backend's ``prepare``
        (``Backend.prepare``) gets the devices of the tensors among them."""
        if self.prepare is not None:
            self.prepare({a.device for a in args if isinstance(a, torch.Tensor)})

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        compile_one = bucketed(self._compile)  # split at DDP's buckets inside a DDP forward
        if self.static_shapes and has_symbolic_inputs(gm):
            return PerSizeCompiled(gm, compile_one, example_inputs)
        try:
            return compile_one(gm, example_inputs)
        except NeedsStaticShapes as e:
            log.info("backend %r compiles this graph once per concrete size: %s", self.name, e)
            return PerSizeCompiled(gm, compile_one, example_inputs)

    def _compile(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        try:
            return compile_wrapped(
                self.applied,
                self.name,
                lambda: _callable(self.compile_fn(gm, example_inputs, **self.options)),
            )
        except NeedsStaticShapes:
            raise  # not a failure: __call__ compiles per size
        except Exception as e:
            graph_text = gm.print_readable(print_output=False)
            if config.suppress_errors:
                log.warning(
                    "backend %r failed (%s: %s); running this graph eagerly "
                    "(config.suppress_errors=True)",
                    self.name,
                    type(e).__name__,
                    e,
                )
                return gm.forward
            raise BackendCompilerFailed(self.name, graph_text, e) from e

    def cache_key(self) -> str | None:
        """The backend and its options as text that means the same in every process, or None.

        Captures are kept on disk under it (``capture.persist``): only a backend found by an
        importable name, with options made of plain values, gets one.
        """
        chain = self.compile_fn if isinstance(self.compile_fn, BackendChain) else None
        parts = [(self.compile_fn, self.options)]
        if chain is not None:
            parts = [
                (link.record.compile_fn or link.record.capabilities, link.options)
                for link in chain.links
            ]
        try:
            name = "+".join(stable_name(fn) for fn, _ in parts)
        except Uncacheable:
            return None
        options = [sorted(opts.items()) for _, opts in parts]
        if not _is_plain(options):
            return None
        wrappers = f"|{','.join(self.runtime_wrappers)}" if self.runtime_wrappers else ""
        return f"{self.name}|{name}|{options if chain else options[0]!r}{wrappers}"


def _callable(compiled: Any) -> Callable:
    """A compile function's result, once it is something the captured code can call."""
    if not callable(compiled):
        raise TypeError(
            f"its compile function returned {type(compiled).__name__} ({compiled!r:.80}), "
            "not a callable; a backend must return the compiled graph as a callable "
            "(gm.forward runs it as it is)"
        )
    return compiled


def _is_plain(value: Any) -> bool:
    """Made of str, int, float, bool, None, tuples, lists and dicts: ``repr`` is stable."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) in (tuple, list):
        return all(_is_plain(v) for v in value)
    if type(value) is dict:
        return all(_is_plain(k) and _is_plain(v) for k, v in value.items())
    return False


def compile(
    model: Callable | None = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: str | Callable | Any = "inductor",
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Compile a function or ``nn.Module`` just in time, like ``torch.compile``.

    Usable as a call, ``compile(fn)``, and as a decorator with or without
    arguments. For an ``nn.Module`` it returns a :class:`CompiledModule`: the
    module itself to every attribute, method and hook, with ``forward`` compiled.

    Args:
        fullgraph: raise ``Unsupported`` instead of breaking the graph.
        dynamic: ``True`` traces every input size symbolically from the first call,
            ``False`` specializes on every size, ``None`` (automatic dynamic) starts
            static and makes a dimension symbolic once its size changed. Marks
            (``torchkiln.mark_dynamic``/``maybe_mark_dynamic``/``mark_static``) win.
        backend: a registered backend name (see ``list_backends``), a
            callable ``(gm, example_inputs) -> callable``, an object with
            such a ``compile`` method, or a list of names (a chain: each op
            goes to the first backend that runs it, the last runs every op).
        mode: one of ``"default"``, ``"reduce-overhead"``, ``"max-autotune"``,
            ``"max-autotune-no-cudagraphs"``; not together with ``options``.
        options: backend options, checked against the backend's schema; with
            a chain, ``{backend name: its options}``.
        disable: return ``model`` unchanged.
    """
    if disable:
        return model if model is not None else (lambda fn: fn)
    graph_compiler = resolve_backend(backend, mode, options)
    if model is None:
        return functools.partial(
            _wrap, graph_compiler=graph_compiler, fullgraph=fullgraph, dynamic=dynamic
        )
    return _wrap(model, graph_compiler=graph_compiler, fullgraph=fullgraph, dynamic=dynamic)


def _wrap(
    model: Callable, *, graph_compiler: GraphCompiler, fullgraph: bool, dynamic: bool | None
) -> Any:
    from torchkiln.capture import optimize

    compile_fn = functools.partial(
        optimize, compile_graph=graph_compiler, fullgraph=fullgraph, dynamic=dynamic
    )
    if isinstance(model, torch.jit.ScriptModule):
        log.warning(
            "torchkiln.compile: %s is a TorchScript module, which runs in the TorchScript "
            "runtime, not in Python: it runs as it is; compile the original nn.Module to trace it",
            type(model).__name__,
        )
        return model
    if is_ddp(model):
        return CompiledDDP(model, compile_fn)
    if isinstance(model, torch.nn.Module):
        return CompiledModule(model, compile_fn)
    if not callable(model):
        raise TypeError(
            f"torchkiln.compile expects a function or nn.Module, got {type(model).__name__}"
        )
    if isinstance(model, functools._lru_cache_wrapper):
        return _compile_cached(model, compile_fn)
    return compile_fn(model)


def _compile_cached(model: Any, compile_fn: Callable[[Callable], Callable]) -> Callable:
    """An ``lru_cache`` wrapper: its function compiled, behind a cache of the same size.

    A cache hit returns the very object an earlier call returned (which the caller may have
    changed in place), so the cache stays in front of the compiled function; it is a new
    cache, since a cache's function cannot be swapped.
    """
    log.info(
        "torchkiln.compile: %s is a functools.lru_cache wrapper; compiling the function it "
        "wraps behind a new cache of the same size (results the original cached are not reused)",
        getattr(model, "__qualname__", model),
    )
    return functools.lru_cache(**model.cache_parameters())(compile_fn(model.__wrapped__))


def resolve_backend(
    backend: str | Callable | Any, mode: str | None, options: Mapping[str, Any] | None
) -> GraphCompiler:
    """Check ``backend``, ``mode`` and ``options`` together; bind them into a GraphCompiler."""
    if mode is not None and options is not None:
        raise InvalidOptionError(
            "Either mode or options can be specified, but both can't be specified at the same time."
        )
    if mode is not None and mode not in MODES:
        described = "; ".join(f"{m!r}: {d}" for m, d in MODE_DESCRIPTIONS.items())
        hint = did_you_mean(mode, MODES) if isinstance(mode, str) else ""
        raise InvalidOptionError(f"unknown mode {mode!r}.{hint} Available modes: {described}")
    if isinstance(backend, (list, tuple)):
        return _resolve_chain(backend, mode, options)
    if isinstance(backend, str):
        record = lookup_backend(backend)
        ensure_usable(record)
        declared = mode in (None, "default") or mode in record.modes
        chosen, wrappers = _split_wrapper_options(
            record, _backend_options(record, mode if declared else None, options)
        )
        if not declared:
            wrappers += _mode_wrappers(mode, repr(record.name), record.modes)
        compile_fn: Callable = record.compile_fn
        if record.capabilities is not None:  # runs some ops: the rest run eagerly
            compile_fn, chosen = BackendChain([Link(record, chosen), Link(_usable("eager"))]), {}
        return GraphCompiler(
            record.name,
            compile_fn,
            chosen,
            tuple(dict.fromkeys(wrappers)),
            static_shapes=not record.dynamic_shapes,
            data_dependent_sizes=record.data_dependent_sizes,
            prepare=record.prepare,
        )
    compile_fn = backend.compile if callable(getattr(backend, "compile", None)) else backend
    if not callable(compile_fn):
        raise TypeError(
            "backend must be a registered name, a callable (gm, example_inputs) -> callable, "
            f"or an object with a compile method; got {type(backend).__name__}"
        )
    name = getattr(compile_fn, "__name__", type(backend).__name__)
    wrappers = () if mode in (None, "default") else _mode_wrappers(mode, repr(name), {})
    chosen = {} if options is None else option_mapping(name, options)
    return GraphCompiler(name, compile_fn, chosen, wrappers)


def _usable(name: str) -> Backend:
    record = lookup_backend(name)
    ensure_usable(record)
    return record


def _resolve_chain(
    names: Sequence[Any], mode: str | None, options: Mapping[str, Any] | None
) -> GraphCompiler:
    """``backend=[...]``: each op to the first backend that runs it; options per backend."""
    for name in names:
        if not isinstance(name, str):
            raise InvalidBackendChain(
                f"a backend chain lists registered backend names; got {type(name).__name__} "
                f"{name!r}: register it with torchkiln.register_backend and list its name"
            )
    if mode not in (None, "default"):
        raise InvalidBackendChain(
            f"mode={mode!r} is for one backend; with the chain {list(names)} pass each "
            "backend's options instead: options={'<backend>': {...}}"
        )
    records = [_usable(name) for name in names]
    per_backend = option_mapping("+".join(names), options or {})
    for key in per_backend:
        if key not in names:
            raise InvalidOptionError(
                f"options name backend {key!r}, which is not in the chain {list(names)}."
                f"{did_you_mean(str(key), names)} With a chain, options map each backend's "
                "name to its options: options={'<backend>': {...}}"
            )
    links, wrappers = [], ()
    for record in records:
        chosen, more = _split_wrapper_options(
            record, _backend_options(record, None, per_backend.get(record.name))
        )
        links.append(Link(record, chosen))
        wrappers += more
    shapes = {
        "static_shapes": not all(r.dynamic_shapes for r in records),
        "data_dependent_sizes": all(r.data_dependent_sizes for r in records),
    }
    preparers = [r.prepare for r in records if r.prepare is not None]
    shapes["prepare"] = functools.partial(_prepare_all, preparers) if preparers else None
    if len(links) == 1 and record.capabilities is None:
        return GraphCompiler(record.name, record.compile_fn, chosen, wrappers, **shapes)
    chain = BackendChain(links)
    return GraphCompiler(chain.name, chain, {}, tuple(dict.fromkeys(wrappers)), **shapes)


def _prepare_all(preparers: list[Callable], devices: set[torch.device]) -> None:
    """A chain's ``prepare``: each of its backends'."""
    for prepare in preparers:
        prepare(devices)


def _mode_wrappers(mode: str, backend: str, declared: Mapping[str, Any]) -> tuple[str, ...]:
    """The runtime wrappers ``mode`` stands for on a backend that does not declare it."""
    wrappers = tuple(w.name for w in runtime_wrappers_for_mode(mode))
    if not wrappers:
        supported = [m for m in MODES if m == "default" or m in declared]
        supported += [m for m in MODES if m not in supported and runtime_wrappers_for_mode(m)]
        raise InvalidOptionError(
            f"backend {backend} does not support mode {mode!r}; it supports: {', '.join(supported)}"
        )
    return wrappers


def _split_wrapper_options(
    record: Backend, options: dict[str, Any]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The options for the compile function, and the runtime wrappers the others turn on."""
    wrapper_options = {o.name: o for o in record.options or () if o.runtime_wrapper is not None}
    wrappers = dict.fromkeys(
        o.runtime_wrapper for o in wrapper_options.values() if options.get(o.name, o.default)
    )
    chosen = {k: v for k, v in options.items() if k not in wrapper_options}
    return chosen, tuple(wrappers)


def _backend_options(
    record: Backend, mode: str | None, options: Mapping[str, Any] | None
) -> dict[str, Any]:
    if mode not in (None, "default"):
        options = record.modes[mode]
    if options is None:
        return {}
    return check_options(record.name, record.options, options)
