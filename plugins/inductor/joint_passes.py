"""Rewrites of the joint forward+backward graph, run before the min-cut partitioner.

Why here: what the forward saves for the backward is decided by the partitioner, which
only picks among the values the joint graph has. A rewrite that offers it a smaller value
to rebuild a large one from makes it save that instead.

:func:`pool_indices_as_offsets`: ``max_pool2d_with_indices`` gives the backward an int64
index per output (8 bytes, ResNet-18's stem alone saves 205 MB of them at batch 128 in
bf16). When only ``max_pool2d_with_indices_backward`` reads it, the backward gets it
rebuilt from an int8 offset within the pooling window (``kh * KW + kw``) and the output's
position, all in pointwise aten ops and ``iota``: the partitioner then saves the offsets
(1 byte) and recomputes the index in the backward; the lowering fuses the offsets into the
pooling kernel, which writes no int64 buffer. The offset is computed with the index read
once (so the lowering need not store it): relative to the window's first element the index
is ``kh * dh * W + kw * dw``, and modulo ``dh * W - KW * dw`` that is ``dw * offset``
while ``dw * (KH * KW - 1 + KW) < dh * W``. Windows of more than 127 elements (no int8
offset) and inputs narrower than that bound keep the int64 index.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map_only

from torchkiln.aot import min_cut_partition

aten, prims = torch.ops.aten, torch.ops.prims

#: largest window whose offsets fit in int8
MAX_OFFSET_WINDOW = 127


def partition(joint_gm: fx.GraphModule, num_fwd_outputs: int) -> tuple:
    """The inductor backend's partitioner: the joint-graph rewrites, then the min cut."""
    pool_indices_as_offsets(joint_gm)
    return min_cut_partition(joint_gm, num_fwd_outputs)


def pool_indices_as_offsets(gm: fx.GraphModule) -> int:
    """Give each max pool's backward its index rebuilt from int8 offsets; returns how many."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.target is aten.max_pool2d_with_indices.default and _rewrite(gm.graph, node):
            rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten


def _index_for_backward_only(pool: fx.Node) -> tuple[fx.Node, list[fx.Node]] | None:
    """The pool's index node and its users, if only max pool backwards read it."""
    index_nodes = [u for u in pool.users if u.target is operator.getitem and u.args[1] == 1]
    if len(index_nodes) != 1 or not index_nodes[0].users:
        return None
    users = list(index_nodes[0].users)
    if any(u.target is not aten.max_pool2d_with_indices_backward.default for u in users):
        return None  # returned, unpooled...: the int64 index is needed as it is
    return index_nodes[0], users


@dataclass(frozen=True)
class _Window:
    """A 2-D max pool's window geometry, and the output and input sizes the index uses."""

    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    out_h: int
    out_w: int
    width: int

    @staticmethod
    def of(pool: fx.Node, index: fx.Node) -> _Window | None:
        """``None`` where sizes are symbolic: the bound of :attr:`modulus` can't be checked
        once for all."""
        args = _arguments(pool)
        x, out = args["self"].meta.get("val"), index.meta.get("val")
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor):
            return None
        sizes = (*out.shape[-2:], x.shape[-1])
        if not all(isinstance(s, int) for s in sizes):
            return None
        kernel = _pair(args["kernel_size"], ())
        return _Window(
            *kernel,
            *_pair(args["stride"], kernel),
            *_pair(args["padding"], ()),
            *_pair(args["dilation"], ()),
            *sizes,
        )

    @property
    def modulus(self) -> int:
        """Index relative to the window's first element, modulo this, is ``dw * offset``."""
        return self.dh * self.width - self.kw * self.dw

    def has_int8_offsets(self) -> bool:
        taps = self.kh * self.kw
        return taps <= MAX_OFFSET_WINDOW and self.dw * (taps - 1) < self.modulus


def _arguments(node: fx.Node) -> dict[str, Any]:
    """The op's arguments by name, defaults filled in."""
    schema = node.target._schema.arguments
    defaults = {a.name: a.default_value for a in schema if a.has_default_value()}
    return {**defaults, **dict(zip((a.name for a in schema), node.args)), **node.kwargs}


def _pair(value: Any, default: Any) -> tuple[int, int]:
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    value = value or list(default)
    return (value[0], value[-1])


def _rewrite(graph: fx.Graph, pool: fx.Node) -> bool:
    """Offsets after the pool's index node, its backwards reading the index rebuilt from them."""
    found = _index_for_backward_only(pool)
    w = _Window.of(pool, found[0]) if found else None
    if w is None or not w.has_int8_offsets():
        return False
    index, users = found
    emit = _Emitter(graph, index.meta["val"].fake_mode, index.meta["val"].device)
    with graph.inserting_before(index.next):
        # flat index of each window's first element (it may lie in the padding)
        rows = emit(prims.iota.default, w.out_h, start=-w.ph * w.width, step=w.sh * w.width)
        cols = emit(prims.iota.default, w.out_w, start=-w.pw, step=w.sw)
        first = emit(aten.add.Tensor, emit(aten.view.default, rows, [w.out_h, 1]), cols)
        shifted = emit(aten.remainder.Scalar, emit(aten.sub.Tensor, index, first), w.modulus)
        if w.dw > 1:
            shifted = emit(aten.div.Scalar_mode, shifted, w.dw, rounding_mode="floor")
        offsets = emit(prims.convert_element_type.default, shifted, torch.int8)
        # the backward's index, from the offsets
        wide = emit(prims.convert_element_type.default, offsets, torch.int64)
        tap_row = emit(aten.div.Scalar_mode, wide, w.kw, rounding_mode="floor")
        down = emit(aten.mul.Tensor, tap_row, w.dh * w.width)
        across = emit(aten.mul.Tensor, emit(aten.remainder.Scalar, wide, w.kw), w.dw)
        rebuilt = emit(aten.add.Tensor, emit(aten.add.Tensor, down, across), first)
    for user in users:
        user.replace_input_with(index, rebuilt)
    return True


class _Emitter:
    """Adds aten calls at the graph's insertion point, with the ``val`` metadata (fake
    tensors) the partitioner and the compilers read."""

    def __init__(self, graph: fx.Graph, fake_mode: Any, device: torch.device) -> None:
        self.graph, self.fake_mode, self.device = graph, fake_mode, device

    def __call__(self, op: Any, *args: Any, **kwargs: Any) -> fx.Node:
        if op is prims.iota.default:
            kwargs = dict(kwargs, dtype=torch.int64, device=self.device, requires_grad=False)
        node = self.graph.call_function(op, args, kwargs)
        vals, kwvals = tree_map_only(fx.Node, lambda n: n.meta["val"], (args, kwargs))
        with self.fake_mode:
            node.meta["val"] = op(*vals, **kwvals)
        return node
