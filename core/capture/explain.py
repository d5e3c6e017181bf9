"""``explain(fn)(*args)``: what capture makes of one call, as data and as a readable summary.

It runs ``fn`` once through the dispatcher with a recording backend of its
own (so it neither uses nor fills the entries of other compiles) and
reports every graph, every graph break with its reason and ``file:line``,
the ops of each graph and the guards of each entry created.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from torchkiln.capture import cache
from torchkiln.capture.capture import CacheEntry
from torchkiln.exc import Unsupported


@dataclass
class ExplainOutput:
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    break_reasons: list[Unsupported] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    eager_reasons: list[Unsupported] = field(default_factory=list)

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
        return "\n".join(lines)


def explain(fn: Callable) -> Callable[..., ExplainOutput]:
    """``explain(fn)(*args, **kwargs)`` runs ``fn`` once, captured, and returns an ``ExplainOutput``."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        result = ExplainOutput()

        def record_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            result.graphs.append(gm)
            return gm.forward

        def record_entry(entry: CacheEntry) -> None:
            result.break_reasons.extend(entry.break_reasons)
            result.guards.extend(entry.guard_descriptions)
            if entry.eager_reason is not None:
                result.eager_reasons.append(entry.eager_reason)

        compiled = cache.optimize(fn, compile_graph=record_graph)
        cache.entry_listeners.append(record_entry)
        try:
            compiled(*args, **kwargs)
        finally:
            cache.entry_listeners.remove(record_entry)
        return result

    return run
