"""``torchkiln.compile``: argument checks, mode -> options, function and Module wrapping.

Everything about the arguments is checked here, when ``compile`` is called,
before anything is captured: unknown backends, unusable backends, bad modes
and options fail at once with a message that says what to do. The result
of the checks is a :class:`GraphCompiler`, the one callable the capture
core hands every captured graph to.
"""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from torchkiln import config
from torchkiln.compiled_module import CompiledModule
from torchkiln.disk_cache import Uncacheable, stable_name
from torchkiln.exc import BackendCompilerFailed, InvalidOptionError, NotImplementedYet
from torchkiln.plugin import MODES, Backend
from torchkiln.registry import ensure_usable, lookup_backend

log = logging.getLogger("torchkiln")


@dataclass
class GraphCompiler:
    """A backend bound to its options: ``(gm, example_inputs) -> callable``.

    Errors raised by the backend become ``BackendCompilerFailed`` naming the
    backend and the graph, or, with ``config.suppress_errors``, a logged
    fallback that runs the graph eagerly.
    """

    name: str
    compile_fn: Callable[..., Callable]
    options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        try:
            return self.compile_fn(gm, example_inputs, **self.options)
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
        try:
            name = stable_name(self.compile_fn)
        except Uncacheable:
            return None
        options = sorted(self.options.items())
        if not _is_plain(options):
            return None
        return f"{self.name}|{name}|{options!r}"


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
        dynamic: ``True`` traces sizes symbolically, ``False`` specializes on
            every size, ``None`` lets torchkiln decide.
        backend: a registered backend name (see ``list_backends``), a
            callable ``(gm, example_inputs) -> callable``, or an object with
            such a ``compile`` method.
        mode: one of ``"default"``, ``"reduce-overhead"``, ``"max-autotune"``,
            ``"max-autotune-no-cudagraphs"``; not together with ``options``.
        options: backend options, checked against the backend's schema.
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
    if isinstance(model, torch.nn.Module):
        return CompiledModule(model, compile_fn)
    if not callable(model):
        raise TypeError(
            f"torchkiln.compile expects a function or nn.Module, got {type(model).__name__}"
        )
    return compile_fn(model)


def resolve_backend(
    backend: str | Callable | Any, mode: str | None, options: Mapping[str, Any] | None
) -> GraphCompiler:
    """Check ``backend``, ``mode`` and ``options`` together; bind them into a GraphCompiler."""
    if mode is not None and options is not None:
        raise InvalidOptionError(
            "Either mode or options can be specified, but both can't be specified at the same time."
        )
    if mode is not None and mode not in MODES:
        raise InvalidOptionError(f"unknown mode {mode!r}; available modes: {', '.join(MODES)}")
    if isinstance(backend, str):
        record = lookup_backend(backend)
        ensure_usable(record)
        return GraphCompiler(
            record.name, record.compile_fn, _backend_options(record, mode, options)
        )
    compile_fn = backend.compile if callable(getattr(backend, "compile", None)) else backend
    if not callable(compile_fn):
        raise TypeError(
            "backend must be a registered name, a callable (gm, example_inputs) -> callable, "
            f"or an object with a compile method; got {type(backend).__name__}"
        )
    if mode not in (None, "default"):
        raise InvalidOptionError(
            f"mode={mode!r} needs a registered backend that declares modes; "
            "pass options= to a callable backend instead"
        )
    name = getattr(compile_fn, "__name__", type(backend).__name__)
    return GraphCompiler(name, compile_fn, dict(options or {}))


def _backend_options(
    record: Backend, mode: str | None, options: Mapping[str, Any] | None
) -> dict[str, Any]:
    if mode not in (None, "default"):
        if mode not in record.modes:
            supported = ", ".join(sorted(set(record.modes) | {"default"}))
            raise InvalidOptionError(
                f"backend {record.name!r} does not support mode {mode!r}; it supports: {supported}"
            )
        options = record.modes[mode]
    if not options:
        return {}
    schema = record.option_schema()
    if not schema:
        raise InvalidOptionError(f"backend {record.name!r} takes no options, got {sorted(options)}")
    for key, value in options.items():
        option = schema.get(key)
        if option is None:
            close = difflib.get_close_matches(key, list(schema), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidOptionError(
                f"unknown option {key!r} for backend {record.name!r}.{hint} "
                f"Valid options: {', '.join(sorted(schema))}"
            )
        if option.type is not None and not isinstance(value, option.type):
            raise InvalidOptionError(
                f"option {key!r} of backend {record.name!r} expects {_type_name(option.type)}, "
                f"got {type(value).__name__} ({value!r})"
            )
        if not option.implemented and value != option.default:
            raise NotImplementedYet(
                f"option {key!r} of backend {record.name!r} is not implemented yet; "
                f"leave it at its default ({option.default!r})"
            )
    return dict(options)


def _type_name(t: type | tuple[type, ...]) -> str:
    types = t if isinstance(t, tuple) else (t,)
    return " or ".join(x.__name__ for x in types)
