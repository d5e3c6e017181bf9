"""``torch.inference_mode`` regions inside a compiled frame, at capture and at run time.

Inference mode is C++ RAII state (``torch._C._InferenceMode``), with no setter: entering a
region pushes a guard on this thread's stack, leaving it pops the guard, which restores the
state from before (grad mode included). The graph records the pushes and pops as nodes.
A backend's tracer (``make_fx`` in the AOT layer) would run those nodes while tracing and
drop them, so the compiled code would make ordinary tensors where eager makes inference
tensors: a graph with such nodes runs as the captured ``GraphModule`` itself, node by node,
as eager does."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from torchkiln import logs
from torchkiln.stats import counters

_local = threading.local()


def _guards() -> list[tuple[bool, Any]]:
    if not hasattr(_local, "guards"):
        _local.guards = []
    return _local.guards


def enter(mode: bool) -> None:
    """Enter ``torch.inference_mode(mode)``."""
    guard = torch._C._InferenceMode(mode)
    guard.__enter__()
    _guards().append((mode, guard))


def exit_() -> None:
    """Leave the innermost region entered here."""
    _, guard = _guards().pop()
    guard.__exit__(None, None, None)


def modes() -> tuple[bool, ...]:
    """The regions entered here and still open, outermost first."""
    return tuple(mode for mode, _ in _guards())


def restore(entered: tuple[bool, ...]) -> None:
    """Leave or re-enter regions until those open are ``entered`` (a ``modes()``): undoes what
    a capture or a failed graph did to the state."""
    while len(_guards()) > len(entered):
        exit_()
    while len(_guards()) < len(entered):
        enter(entered[len(_guards())])


class InferenceModeRestore:
    """The ``__exit__`` of a ``torch.inference_mode`` block that a graph break left open (as
    ``GradModeRestore``): calling it leaves the region the earlier graph entered."""

    __slots__ = ()

    def __call__(self, *exc_info: Any) -> bool:
        exit_()
        return False


def switches(gm: torch.fx.GraphModule) -> bool:
    return any(node.target in (enter, exit_) for node in gm.graph.nodes)


class EagerGraph:
    """A graph with inference-mode switches, run node by node (see the module docstring); an
    exception leaves the regions it entered."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm

    def __call__(self, *args: Any) -> Any:
        entered = modes()
        try:
            return self.gm(*args)
        except BaseException:
            restore(entered)
            raise


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list, compiler: Callable) -> Any:
    """``compiler(gm, example_inputs)``, or the graph itself where it switches inference mode
    (said under ``TORCHKILN_LOGS=graph_breaks`` and counted: the backend does not run it)."""
    if switches(gm):
        counters["graphs"]["run_as_captured"] += 1
        logs.artifact(
            "graph_breaks",
            "a graph that enters or leaves torch.inference_mode runs as captured, not through "
            "the backend (its tracer would drop the switches): move the region out of the "
            "compiled function to compile its body",
        )
        return EagerGraph(gm)
    return compiler(gm, example_inputs)
