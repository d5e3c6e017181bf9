"""The dispatcher: a cache of captures per code object, and the wrapper ``optimize`` returns.

There is no PEP 523 frame hook without ``torch._dynamo``, so interception
is a Python wrapper: it binds the call to the frame's locals, runs the
guard function of each cache entry of the code object in order, and calls
the first passing entry's transformed function. No entry passes: capture
a new one (up to ``config.cache_size_limit``, then run eagerly and say why
once). Functions sharing a code object share its cache; entries are also
kept per capture configuration (backend, fullgraph), so two compiles of
one function with different backends do not mix; ``cache_size_limit``
applies to each.

The hot path is: a length check, a loop over the entries, one guard call,
one ``Counter`` increment (``counters["cache"]["hits"]``) and the call.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import types
from collections.abc import Callable
from typing import Any

import torch

from torchkiln import config, logs
from torchkiln.capture import persist
from torchkiln.capture.builder import grad_mode_decorated
from torchkiln.capture.dynamic import SizeHistory, data_dependent_break
from torchkiln.capture.dynamic import policy as dynamic_policy
from torchkiln.capture.frame_capture import CacheEntry, capture_frame
from torchkiln.capture.resume import clear_resume_codes
from torchkiln.capture.signature import (
    MISSING,
    call_original_source,
    default_argument,
    dispatch_source,
)
from torchkiln.capture.targets import frame_function
from torchkiln.exc import NotImplementedYet, RecompileLimitExceeded
from torchkiln.stats import counters

log = logging.getLogger("torchkiln")


_cache_counter = counters["cache"]

#: Held while capturing and compiling: the translator, the AOT layer and backends share
#: process-wide tracing state (torch.fx's patcher, these caches), so one thread compiles at
#: a time. Re-entrant: a capture can compile nested frames. Guard checks and runs never take it.
compile_lock = threading.RLock()


class CaptureConfig:
    """The backend, fullgraph and dynamic flags an entry was captured with (canonical:
    compared by identity)."""

    __slots__ = ("compile_graph", "dynamic", "fullgraph")

    def __init__(self, compile_graph: Callable, fullgraph: bool, dynamic: bool | None = None):
        self.compile_graph = compile_graph
        self.fullgraph = fullgraph
        self.dynamic = dynamic


_configs: list[CaptureConfig] = []


def config_for(
    compile_graph: Callable, fullgraph: bool, dynamic: bool | None = None
) -> CaptureConfig:
    with compile_lock:
        for cfg in _configs:
            if (
                cfg.fullgraph == fullgraph
                and cfg.dynamic is dynamic
                and (cfg.compile_graph is compile_graph or cfg.compile_graph == compile_graph)
            ):
                return cfg
        cfg = CaptureConfig(compile_graph, fullgraph, dynamic)
        _configs.append(cfg)
        return cfg


class FrameCache:
    """The entries of one code object, per capture configuration: ``(guard, run)`` for dispatch."""

    def __init__(self, code: types.CodeType):
        self.code = code
        self.by_config: dict[CaptureConfig, list[tuple[Callable, Callable]]] = {}
        self.details: dict[CaptureConfig, list[CacheEntry]] = {}
        #: The input sizes earlier captures saw, per configuration (automatic dynamic).
        self.sizes: dict[CaptureConfig, SizeHistory] = {}
        self.limit_logged = False
        ns: dict = {}
        exec(call_original_source(code, "___call_original"), ns)
        self.call_original = ns["___call_original"]

    def entries(self, cfg: CaptureConfig) -> list[tuple[Callable, Callable]]:
        """The dispatch list for ``cfg`` (the same list object for the cache's lifetime)."""
        entries = self.by_config.get(cfg)
        if entries is None:
            entries = self.by_config[cfg] = []
            self.details[cfg] = []
        return entries

    def add(self, entry: CacheEntry, cfg: CaptureConfig) -> None:
        self.entries(cfg).append((entry.guard, entry.run))
        self.details[cfg].append(entry)
        if entry.guard_set is not None:  # an object its guards hold weakly died
            entry.guard_set.on_death.append(functools.partial(self.remove, entry, cfg))

    def remove(self, entry: CacheEntry, cfg: CaptureConfig) -> None:
        """Drop ``entry`` (nothing to do if ``clear`` dropped it already)."""
        details, dispatch = self.details[cfg], self.by_config[cfg]
        for i, found in enumerate(details):
            if found is entry:
                del details[i]
                break
        for i, (guard, _) in enumerate(dispatch):
            if guard is entry.guard:
                del dispatch[i]
                break

    def all_entries(self) -> list[CacheEntry]:
        return [entry for entries in self.details.values() for entry in entries]

    def clear(self) -> None:
        for entries in self.by_config.values():
            entries.clear()
        for details in self.details.values():
            details.clear()
        self.sizes.clear()
        self.limit_logged = False


_caches: dict[types.CodeType, FrameCache] = {}

#: Called with every new ``CacheEntry`` (``explain`` listens here).
entry_listeners: list[Callable[[CacheEntry], None]] = []


def frame_cache(code: types.CodeType) -> FrameCache:
    with compile_lock:
        cache = _caches.get(code)
        if cache is None:
            cache = _caches[code] = FrameCache(code)
        return cache


def reset() -> None:
    """Clear every cache entry and counter (wrappers stay valid and recapture)."""
    with compile_lock:
        for cache in _caches.values():
            cache.clear()
        for counter in counters.values():
            counter.clear()
        _configs.clear()
        _logged_breaks.clear()
        clear_resume_codes()


def where(code: types.CodeType) -> str:
    return f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"


_logged_breaks: set[tuple[str, str | None]] = set()


def log_break(reason: str, location: str | None, kind: str) -> None:
    """``TORCHKILN_LOGS=graph_breaks``: each distinct break once, with reason and source line."""
    if (reason, location) not in _logged_breaks:
        _logged_breaks.add((reason, location))
        logs.artifact("graph_breaks", "%s: %s at %s", kind, reason, location or "<unknown>")


def on_miss(fn: types.FunctionType, cfg: CaptureConfig, cache: FrameCache, args: tuple) -> Any:
    """No entry matched: recompile (or hit the limit and run eagerly), one thread at a time.

    Under a torch dispatch mode (a user's, or a tracer's fake or proxy mode) the frame runs
    as written, as torch.compile's does: the mode sees every aten op, which compiled code
    would hide from it, and a capture would trace the mode's effect into the graph. Every
    entry's guards fail while one is active."""
    if torch._C._len_torch_dispatch_stack():
        counters["eager_fallback"]["dispatch_mode"] += 1
        return cache.call_original(fn, *args)
    with compile_lock:
        run = _run_for_miss(fn, cfg, cache, args)
    return run(fn, *args)


def _run_for_miss(
    fn: types.FunctionType, cfg: CaptureConfig, cache: FrameCache, args: tuple
) -> Callable[..., Any]:
    """What runs a call that missed: an entry another thread added while this one waited for
    the lock, a new capture, or the uncompiled frame."""
    run = _passing_entry(fn, cfg, cache, args)
    if run is not None:
        return run
    counters["cache"]["misses"] += 1
    previous = cache.details[cfg]
    limit = config.cache_size_limit
    if len(previous) >= limit:
        # every later call of this frame with new inputs comes here: the message (which
        # runs the failing entry's guards one by one) is built only when it is shown
        if config.error_on_recompile_limit:
            raise RecompileLimitExceeded(_limit_message(cache, previous, fn, args))
        counters["eager_fallback"]["cache_size_limit"] += 1
        if not cache.limit_logged:
            cache.limit_logged = True
            log.warning(
                "%s; running it eagerly for new inputs", _limit_message(cache, previous, fn, args)
            )
        return cache.call_original
    reasons = None
    if previous:
        counters["recompiles"]["total"] += 1
        if logs.enabled("recompiles"):
            reasons = "; ".join(_failed_guard(e, fn, args) for e in previous)
    counters["frames"]["total"] += 1
    history = cache.sizes.setdefault(cfg, SizeHistory())
    try:
        entry = persist.load(fn, cfg, args) if config.persist_captures else None
        if entry is None:
            before_capture = getattr(cfg.compile_graph, "before_capture", None)
            if before_capture is not None:
                before_capture(args)
            data_dependent = data_dependent_break(cfg.compile_graph)
            with dynamic_policy(cfg.dynamic, history, data_dependent):
                entry = capture_frame(fn, args, cfg)
            if config.persist_captures:
                persist.store(fn, cfg, entry)
    finally:
        if reasons is not None:  # the capture decided which sizes to make dynamic
            dynamic = "".join(f"; {c}: compiled as dynamic" for c in history.changes)
            logs.artifact("recompiles", "recompiling %s: %s%s", where(cache.code), reasons, dynamic)
        history.changes.clear()
    cache.add(entry, cfg)
    for listener in entry_listeners:
        listener(entry)
    for reason in entry.break_reasons:
        counters["graph_break"][reason.reason] += 1
        log_break(reason.reason, reason.location, "graph break")
    if entry.eager_reason is not None:
        counters["eager_fallback"][entry.eager_reason.reason] += 1
        log_break(
            entry.eager_reason.reason,
            entry.eager_reason.location,
            f"running {cache.code.co_name} eagerly",
        )
    else:
        counters["frames"]["ok"] += 1
    return entry.run


def _limit_message(
    cache: FrameCache, previous: list[CacheEntry], fn: types.FunctionType, args: tuple
) -> str:
    why = (
        f"last failing guard: {_failed_guard(previous[-1], fn, args)}"
        if previous
        else "compiling is off"
    )
    return f"{where(cache.code)} hit config.cache_size_limit={config.cache_size_limit}; {why}"


def _failed_guard(entry: CacheEntry, fn: types.FunctionType, args: tuple) -> str:
    return entry.first_failure(fn, *args) or "guards passed (entry for another configuration)"


def run_frame(fn: types.FunctionType, cfg: CaptureConfig, cache: FrameCache, args: tuple) -> Any:
    """Dispatch one call whose frame locals are already bound (resume functions)."""
    run = _passing_entry(fn, cfg, cache, args)
    if run is None:
        return on_miss(fn, cfg, cache, args)
    return run(fn, *args)


def _passing_entry(
    fn: types.FunctionType, cfg: CaptureConfig, cache: FrameCache, args: tuple
) -> Callable[..., Any] | None:
    """The ``run`` of the first entry whose guard passes (counted as a hit), or None."""
    for guard, run in cache.entries(cfg):
        try:
            ok = guard(fn, *args)
        except Exception:
            ok = False
        if ok:
            _cache_counter["hits"] += 1
            return run
    return None


def dispatcher(
    fn: types.FunctionType | types.CodeType,
    cfg: CaptureConfig,
    bound_self: Any = None,
    bound: bool = False,
) -> Callable[..., Any]:
    """The per-call fast path for ``fn`` (generated: see ``signature.dispatch_source``).

    Given a code object instead of a function, the dispatcher takes the function as its
    first argument, so that one dispatcher serves every function of that code and holds
    none of them (graph breaks call through such dispatchers: ``CallThroughDispatch``).
    """
    code = fn if isinstance(fn, types.CodeType) else fn.__code__
    cache = frame_cache(code)
    ns = {
        "___entries": cache.entries(cfg),
        "___self": bound_self,
        "___cfg": cfg,
        "___cache": cache,
        "___hits": _cache_counter,
        "___on_miss": on_miss,
        "___D": MISSING,
        "___default": default_argument,
    }
    if code is not fn:
        ns["___fn"] = fn
    source = dispatch_source(code, bound, fn_param=code is fn)
    exec(compile(source, f"<torchkiln dispatch {where(code)}>", "exec"), ns)
    return ns["___dispatch"]


def optimize(
    fn: Callable,
    *,
    compile_graph: Callable,
    fullgraph: bool = False,
    dynamic: bool | None = None,
) -> Callable:
    """A callable that behaves like ``fn`` and runs captured graphs through ``compile_graph``.

    ``fn`` may be a function, a bound method (``self`` becomes the first
    frame local, guarded by type when it is a module), a callable
    object (its ``__call__``) or any other callable, called from a frame
    of its own (``targets``). Tensors the frame reads are lifted as graph
    inputs, parameters and buffers included: ``compile_graph(gm,
    example_inputs)`` gets their real values from the first call.
    """
    if dynamic is not None and type(dynamic) is not bool:
        raise TypeError(f"dynamic must be None, True or False, not {dynamic!r}")
    cfg = config_for(compile_graph, fullgraph, dynamic)
    target = getattr(fn, "_torchkiln_original", fn)
    if not callable(target):
        raise TypeError(f"torchkiln can only compile callables, not {type(target).__name__}")
    bound_self, target = frame_function(target)
    decorated = grad_mode_decorated(target)
    if decorated is not None:  # @torch.no_grad() and friends: the mode is set, then inner runs
        mode, inner = decorated
        if bound_self is not None:
            inner = types.MethodType(inner, bound_self)
        compiled = optimize(
            inner, compile_graph=compile_graph, fullgraph=fullgraph, dynamic=dynamic
        )

        @functools.wraps(fn)
        def under_grad_mode(*args: Any, **kwargs: Any) -> Any:
            with torch.set_grad_enabled(mode):
                return compiled(*args, **kwargs)

        under_grad_mode._torchkiln_original = fn  # type: ignore[attr-defined]
        return under_grad_mode
    if inspect.iscoroutinefunction(target) or inspect.isgeneratorfunction(target):
        raise NotImplementedYet(f"compiling generator or coroutine function {target.__qualname__}")
    if bound_self is not None and target.__code__.co_argcount == 0:
        # self goes into *args: a method wrapped by a decorator such as @torch.no_grad()
        wrapper = functools.partial(dispatcher(target, cfg), bound_self)
    else:
        wrapper = dispatcher(target, cfg, bound_self, bound=bound_self is not None)
    if hasattr(fn, "__name__"):
        wrapper = functools.wraps(fn)(wrapper)
    wrapper._torchkiln_original = fn  # type: ignore[attr-defined]
    return wrapper
