"""Bounds checks of index tensors, for backends whose kernels read wherever an index points.

Eager raises when an index tensor holds a value outside the dimension it indexes
(``embedding``, ``x[i]``, ``gather``...). OpenVINO's Gather gives zeros there, TVM's take
clamps: a compiled graph would answer where eager raises. Each such op reads its whole
index operand, so where that operand is an input of the graph a backend compiles, checking
the input before the graph runs is exact: :func:`index_checks` finds them once,
:func:`check_indices` runs them (one ``aminmax`` per index tensor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.fx as fx

from torchkiln.exc import IndexOutOfBounds

aten = torch.ops.aten


@dataclass(frozen=True)
class IndexCheck:
    """Input ``input`` of the graph indexes a dimension of ``size``; ``negative_ok``: values
    in ``[-size, 0)`` count from the end (advanced indexing), else only ``[0, size)`` is valid."""

    input: int
    size: int
    negative_ok: bool


def _operands(node: fx.Node) -> list[tuple[object, object, int, bool]]:
    """(index operand, indexed tensor, dimension, negative_ok) of each index ``node`` takes."""
    args = node.args
    if node.target is aten.embedding.default:
        return [(args[1], args[0], 0, False)]
    if node.target in (aten.gather.default, aten.index_select.default):
        return [(args[2], args[0], args[1], False)]
    if node.target in (aten.index.Tensor, aten.index_put.default):
        return [(i, args[0], d, True) for d, i in enumerate(args[1]) if i is not None]
    return []


def index_checks(gm: fx.GraphModule) -> tuple[IndexCheck, ...]:
    """The checks of ``gm``'s integer inputs that its index ops read."""
    position = {n: k for k, n in enumerate(gm.graph.find_nodes(op="placeholder"))}
    checks: dict[tuple[int, int, bool], IndexCheck] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        for index, tensor, dim, negative_ok in _operands(node):
            value = getattr(index, "meta", {}).get("val")
            indexed = getattr(tensor, "meta", {}).get("val")
            if index not in position or not isinstance(indexed, torch.Tensor):
                continue
            if not isinstance(value, torch.Tensor) or value.dtype not in (torch.int64, torch.int32):
                continue  # boolean masks select, they do not index
            size = indexed.shape[dim % max(indexed.dim(), 1)] if indexed.dim() else 1
            if isinstance(size, int):
                check = IndexCheck(position[index], size, negative_ok)
                checks[check.input, check.size, check.negative_ok] = check
    return tuple(checks.values())


def check_indices(args: Sequence[object], checks: Sequence[IndexCheck]) -> None:
    """Raise :class:`IndexOutOfBounds` if an index input holds a value its check rejects."""
    for check in checks:
        index = args[check.input]
        if not isinstance(index, torch.Tensor) or not index.numel():
            continue
        low, high = (int(v) for v in torch.aminmax(index))
        floor = -check.size if check.negative_ok else 0
        if low < floor or high >= check.size:
            bad = low if low < floor else high
            raise IndexOutOfBounds(
                f"index {bad} is out of bounds for a dimension of size {check.size}"
            )
