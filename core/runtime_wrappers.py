"""Applying runtime wrappers (``torchkiln.plugin.RuntimeWrapper``) around compiled graphs.

A compiled model that asked for wrappers (through its mode or a backend option)
holds one :class:`AppliedWrappers`: the state each wrapper's ``make()`` built, shared
by all of the model's graphs. While a backend compiles a graph, the wrappers are the
*active* ones: ``torchkiln.aot`` claims them and wraps each forward, backward and
inference graph it compiles (the only way a wrapper that records kernels, like CUDA
graphs, can serve training). A backend that never claims them gets its whole
compiled callable wrapped, used for the calls that need no gradient.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from torchkiln.plugin import RuntimeWrapper

log = logging.getLogger("torchkiln")


class AppliedWrappers:
    """The runtime wrappers of one compiled model, each with its shared state."""

    def __init__(self, wrappers: Sequence[RuntimeWrapper]):
        self.wrappers = tuple(wrappers)
        self.names = tuple(w.name for w in self.wrappers)
        self._wraps: list[Callable[[Callable, str], Callable]] | None = None

    def wrap(self, fn: Callable, kind: str) -> Callable:
        """``fn`` inside every wrapper, the first one innermost."""
        if self._wraps is None:  # built on first use: ``make`` may need the device
            self._wraps = [w.make() for w in self.wrappers]
        for wrap in self._wraps:
            fn = wrap(fn, kind)
        return fn


class _Handoff:
    """The wrappers active while one graph compiles, and whether ``torchkiln.aot`` took them."""

    def __init__(self, wrappers: AppliedWrappers):
        self.wrappers = wrappers
        self.claimed = False


_active: contextvars.ContextVar[_Handoff | None] = contextvars.ContextVar(
    "torchkiln_runtime_wrappers", default=None
)


def claim() -> AppliedWrappers | None:
    """The wrappers of the graph being compiled, for a layer that applies them itself."""
    handoff = _active.get()
    if handoff is None:
        return None
    handoff.claimed = True
    return handoff.wrappers


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """No wrappers active: for the parts of a graph compiled inside one that holds them."""
    token = _active.set(None)
    try:
        yield
    finally:
        _active.reset(token)


@contextlib.contextmanager
def _activated(wrappers: AppliedWrappers) -> Iterator[_Handoff]:
    handoff = _Handoff(wrappers)
    token = _active.set(handoff)
    try:
        yield handoff
    finally:
        _active.reset(token)


def compile_wrapped(
    wrappers: AppliedWrappers | None, backend: str, compile_graph: Callable[[], Callable]
) -> Callable:
    """``compile_graph()`` with ``wrappers`` active; wraps its result unless they were claimed."""
    if wrappers is None:
        return compile_graph()
    with _activated(wrappers) as handoff:
        compiled = compile_graph()
    if handoff.claimed:
        return compiled
    return _InferenceOnly(compiled, wrappers, backend)


class _InferenceOnly:
    """A backend's whole compiled callable, called through the wrappers when no grad is needed.

    A wrapper sees no autograd graph: calls that need gradients run the backend's
    callable as it is (said once per compiled graph).
    """

    def __init__(self, compiled: Callable, wrappers: AppliedWrappers, backend: str):
        self.compiled = compiled
        self.wrapped = wrappers.wrap(compiled, "graph")
        self.describe = f"runtime wrappers {', '.join(wrappers.names)} around backend {backend!r}"
        self.said = False

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled() and any(
            isinstance(a, torch.Tensor) and a.requires_grad for a in args
        ):
            if not self.said:
                self.said = True
                log.warning(
                    "%s: this call needs gradients and the backend compiles no separate "
                    "backward (it does not use torchkiln.aot), so it runs without them; "
                    "use a backend built on torchkiln.aot (aot_eager, inductor, ...) for "
                    "training with them",
                    self.describe,
                )
            return self.compiled(*args)
        return self.wrapped(*args)
