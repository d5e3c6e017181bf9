"""DDP's graph split: one subgraph per gradient bucket, each compiled by the backend.

DDP all-reduces a bucket of gradients (``bucket_cap_mb``) as soon as all of them are
ready. A graph compiled whole runs its backward as one autograd node: every gradient is
ready only at its end, and no all-reduce overlaps the backward. Split where the buckets
fill up (walking the graph from its end, as the backward runs), each subgraph's backward
is a node of its own, so the last layers' buckets are reduced while the first layers'
backward still runs. torch.compile's ``DDPOptimizer`` does the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.passes.split_module import split_module
from torch.nn.parallel import DistributedDataParallel

from torchkiln import config, logs
from torchkiln.static_shapes import has_symbolic_inputs
from torchkiln.stats import counters

log = logging.getLogger("torchkiln.distributed")

Compile = Callable[[torch.fx.GraphModule, list[Any]], Callable]


def active_ddp() -> DistributedDataParallel | None:
    """The DDP module whose forward is running now (DDP sets it around its module's call)."""
    if not torch.distributed.is_available():
        return None
    return DistributedDataParallel._get_active_ddp_module()


def bucketed(compile_one: Compile) -> Compile:
    """``compile_one``, splitting graphs captured inside a DDP forward at its buckets.

    Outside a DDP forward, or with ``config.ddp_bucket_split`` off, it is ``compile_one``.
    """
    ddp = active_ddp()
    if ddp is None or not config.ddp_bucket_split:
        return compile_one
    cap = ddp.bucket_bytes_cap

    def compile_split(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        return split_at_buckets(gm, example_inputs, cap, compile_one)

    return compile_split


def split_at_buckets(
    gm: torch.fx.GraphModule, example_inputs: list[Any], cap: int, compile_one: Compile
) -> Callable:
    """``gm`` cut into subgraphs holding about ``cap`` bytes of parameters each, compiled."""
    if has_symbolic_inputs(gm):
        logs.artifact("distributed", "DDP graph not split: its inputs have symbolic sizes")
        return compile_one(gm, example_inputs)
    buckets, count = _assign_buckets(gm, example_inputs, cap)
    if count <= 1:
        logs.artifact("distributed", "DDP graph not split: its parameters fill one bucket")
        return compile_one(gm, example_inputs)
    # buckets are numbered from the graph's end: the graph's first bucket is the last
    split = split_module(gm, gm, lambda node: count - 1 - buckets[node], keep_original_order=True)
    captured = {node.name: node for node in gm.graph.nodes}
    subgraphs = [name for name, _ in split.named_children()]
    for name in subgraphs:
        sub = getattr(split, name)
        for node in sub.graph.nodes:
            if node.op == "placeholder" and node.name in captured:
                node.meta = {**captured[node.name].meta, **node.meta}
        setattr(split, name, _CompiledOnFirstCall(sub, compile_one))
    counters["ddp"]["subgraphs"] += len(subgraphs)
    logs.artifact(
        "distributed",
        "DDP graph split into %d subgraphs at bucket_cap %d bytes:\n%s",
        len(subgraphs),
        cap,
        split.print_readable(print_output=False),
    )
    return split.forward


def _assign_buckets(
    gm: torch.fx.GraphModule, example_inputs: list[Any], cap: int
) -> tuple[dict[torch.fx.Node, int], int]:
    """Each op node's bucket, numbered from the graph's end, and the number of buckets.

    A bucket is full once its parameters reach ``cap`` bytes; the next bucket starts at the
    next node that reads a new parameter (ops without parameters stay where they are).
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sizes = {
        node: value.numel() * value.element_size()
        for node, value in zip(placeholders, example_inputs)
        if isinstance(value, torch.nn.Parameter) and value.requires_grad
    }
    buckets: dict[torch.fx.Node, int] = {}
    bucket, filled = 0, 0
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        params = [p for p in node.all_input_nodes if p in sizes]
        if params and filled >= cap:
            bucket, filled = bucket + 1, 0
        buckets[node] = bucket
        filled += sum(sizes.pop(p) for p in params)
    return buckets, bucket + 1


class _CompiledOnFirstCall(torch.nn.Module):
    """A subgraph compiled by the backend when it first runs, with the values it gets.

    The split graph runs its subgraphs one after the other; each one's inputs exist
    only once the one before has run.
    """

    def __init__(self, gm: torch.fx.GraphModule, compile_one: Compile):
        super().__init__()
        self.gm = gm
        self.compile_one = compile_one
        self.compiled: Callable | None = None

    def forward(self, *args: Any) -> Any:
        if self.compiled is None:
            from torchkiln.capture.dispatch import compile_lock

            with compile_lock:
                if self.compiled is None:
                    self.compiled = self.compile_one(self.gm, list(args))
        return self.compiled(*args)
