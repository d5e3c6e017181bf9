"""``explain(fn)(*args)``: what capture makes of one call, as data and as a readable summary.

It runs ``fn`` once through the dispatcher with a recording backend of its
own (so it neither uses nor fills the entries of other compiles) and
reports every graph, every graph break with its reason and ``file:line``,
the ops of each graph and the guards of each entry created.

``explain(fn, backend=...)`` also compiles each graph with that backend and, for one
that declares capabilities or a chain (``["onnxrt", "inductor"]``), reports each
compiled graph's partition plan: which ops went to which backend, and why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture import dispatch
from torchkiln.capture.frame_capture import CacheEntry
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.chain import PartitionPlan


@dataclass
class ExplainOutput:
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    break_reasons: list[Unsupported] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    eager_reasons: list[Unsupported] = field(default_factory=list)
    #: For each graph, how its forward, backward or inference graphs were split among
    #: the backends of a chain (a backward graph is compiled when ``fn`` runs backward);
    #: empty lists without a backend, or for one that runs whole graphs.
    partition_plans: list[list[PartitionPlan]] = field(default_factory=list)

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    @property
    def ops_per_graph(self) -> list[list[Any]]:
        ops = ("call_function", "call_method", "call_module")
        return [
            [
                n.target
                for n in gm.graph.nodes
                if n.op in ops and n.target is not torch._C._set_grad_enabled
            ]
            for gm in self.graphs
        ]

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}"]
        if self.break_reasons:
            lines.append("Break reasons:")
            lines += [
                f"  {i + 1}. {r.reason}\n     at {r.location}"
                for i, r in enumerate(self.break_reasons)
            ]
        if self.eager_reasons:
            lines.append("Run eagerly:")
            lines += [f"  - {r.reason} at {r.location}" for r in self.eager_reasons]
        lines.append("Ops per graph:")
        for i, ops in enumerate(self.ops_per_graph):
            names = ", ".join(getattr(op, "__name__", str(op)) for op in ops)
            lines.append(f"  graph {i}: {len(ops)} ops: {names}")
        lines.append(f"Guards ({len(self.guards)}):")
        lines += [f"  - {g}" for g in self.guards]
        if any(self.partition_plans):
            lines.append("Partition plans:")
            for i, plans in enumerate(self.partition_plans):
                lines.append(f"  graph {i}:")
                lines += ["    " + line for plan in plans for line in str(plan).splitlines()]
        return "\n".join(lines)


def explain(
    fn: Callable, backend: Any = None, options: dict[str, Any] | None = None
) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args, **kwargs)`` runs ``fn`` once, captured, and returns an ``ExplainOutput``.

    Without ``backend`` the graphs run as captured; with one (what ``compile`` takes, with
    its ``options``) they are compiled by it, and a chain's partition plans are reported.
    """
    if backend is None and options is not None:
        raise TypeError("explain(fn, options=...) needs backend=: the options are that backend's")
    _compiler(backend, options, [])  # a wrong backend or option fails here, not on the first call

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        result = ExplainOutput()

        def record_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            result.graphs.append(gm)
            result.partition_plans.append([])
            compile_graph = _compiler(backend, options, result.partition_plans[-1])
            return gm.forward if compile_graph is None else compile_graph(gm, example_inputs)

        def record_entry(entry: CacheEntry) -> None:
            result.break_reasons.extend(entry.break_reasons)
            result.guards.extend(entry.guard_descriptions)
            if entry.eager_reason is not None:
                result.eager_reasons.append(entry.eager_reason)

        compiled = dispatch.optimize(fn, compile_graph=record_graph)
        dispatch.entry_listeners.append(record_entry)
        try:
            compiled(*args, **kwargs)
        finally:
            dispatch.entry_listeners.remove(record_entry)
        return result

    return run


def _compiler(backend: Any, options: Any, plans: list) -> Callable | None:
    """``backend`` bound to ``options`` (None for none), recording a chain's plans in ``plans``.

    One per graph, so that each graph's plans (its backward's too, compiled later) land in
    its own list.
    """
    if backend is None:
        return None
    from torchkiln.api import resolve_backend
    from torchkiln.chain import BackendChain

    compiler = resolve_backend(backend, None, options)
    if isinstance(compiler.compile_fn, BackendChain):
        compiler.compile_fn.record_plans(plans)
    return compiler
