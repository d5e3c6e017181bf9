"""Converters of view, layout, indexing and tensor-creation aten ops.

Every view becomes a ``Reshape``/``Transpose``/``Slice`` to the size make_fx recorded
(computed from the inputs' shapes where it is symbolic), and creation ops of static
sizes become constants.
"""

from __future__ import annotations

import torch

from torchkiln.exc import NotImplementedYet
from torchkiln_onnxrt.converter import (
    GraphBuilder,
    Value,
    converts,
    meta_of,
    out_dtype,
    out_shape,
)
from torchkiln_onnxrt.dtypes import to_numpy
from torchkiln_onnxrt.sizes import (
    broadcast,
    concrete,
    is_symbolic,
    known_nonnegative,
    same_sizes,
)

aten = torch.ops.aten

INT64_MAX = 2**63 - 1

#: The dtypes ONNX's Range makes, which an arange of symbolic bounds becomes.
RANGE_DTYPES = (torch.int64, torch.int32, torch.float32, torch.float64)


def _dim(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 else dim


@converts(
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.unsqueeze.default,
    aten.flatten.using_ints,
    aten.view_copy.default,
)
def reshape(b: GraphBuilder, node, x: Value, *_, **__) -> str:
    return b.reshape(x.name, out_shape(node))


@converts(aten.expand.default, aten.expand_copy.default)
def expand(b: GraphBuilder, node, x: Value, *_, **__) -> str:
    return b.op("Expand", [x.name, b.ints(out_shape(node))])


@converts(aten.permute.default, aten.permute_copy.default)
def permute(b: GraphBuilder, node, x: Value, dims) -> str:
    perm = [_dim(d, x.ndim) for d in dims]
    if perm == [1, 0]:
        return b.transpose_2d(x.name)
    return b.op("Transpose", [x.name], perm=perm)


@converts(aten.t.default)
def t(b: GraphBuilder, node, x: Value) -> str:
    return x.name if x.ndim < 2 else b.transpose_2d(x.name)


@converts(aten.transpose.int)
def transpose(b: GraphBuilder, node, x: Value, dim0: int, dim1: int) -> str:
    perm = list(range(x.ndim))
    d0, d1 = _dim(dim0, x.ndim), _dim(dim1, x.ndim)
    perm[d0], perm[d1] = perm[d1], perm[d0]
    if perm == [1, 0]:
        return b.transpose_2d(x.name)
    return b.op("Transpose", [x.name], perm=perm)


@converts(aten.select.int)
def select(b: GraphBuilder, node, x: Value, dim: int, index: int) -> str:
    dim = _dim(dim, x.ndim)
    if not known_nonnegative(index):
        index = index + x.shape[dim]
        if not known_nonnegative(index):
            concrete([index], "a select's index")
    return b.op("Gather", [x.name, b.as_dtype(index, torch.int64)], axis=dim)


@converts(aten.slice.Tensor)
def slice_(
    b: GraphBuilder, node, x: Value, dim: int = 0, start=None, end=None, step: int = 1
) -> str:
    # ONNX's Slice clamps start and end and counts negative ones from the end, as Python does
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    dim = _dim(dim, x.ndim)
    return b.op("Slice", [x.name, b.ints([start]), b.ints([end]), b.ints([dim]), b.ints([step])])


@converts(aten.slice_scatter.default)
def slice_scatter(
    b: GraphBuilder, node, x: Value, src: Value, dim: int = 0, start=None, end=None, step: int = 1
) -> str:
    """``x`` with its slice ``start:end:step`` along ``dim`` replaced by ``src``: a
    ``ScatterElements`` at ``start, start + step, ...``, as many as ``src`` has along ``dim``
    (what the slice selects: its end only bounds that count)."""
    dim = _dim(dim, x.ndim)
    size = x.shape[dim]
    start = 0 if start is None else start
    if isinstance(start, int) and isinstance(size, int):  # Python's negative and clamped starts
        start = min(max(start + size if start < 0 else start, 0), size)
    elif not known_nonnegative(start):
        concrete([start], "a slice_scatter's start")
    count = src.shape[dim]
    bounds = [b.as_dtype(v, torch.int64) for v in (start, start + count * step, step)]
    shape = [1] * x.ndim
    shape[dim] = count
    indices = b.op("Expand", [b.reshape(b.op("Range", bounds), shape), b.ints(src.shape)])
    dtype = out_dtype(node)
    return b.op(
        "ScatterElements", [b.as_dtype(x, dtype), indices, b.as_dtype(src, dtype)], axis=dim
    )


@converts(aten.cat.default)
def cat(b: GraphBuilder, node, tensors: list[Value], dim: int = 0) -> str:
    dtype = out_dtype(node)
    ndim = len(out_shape(node))
    # torch.cat skips legacy empty 1-D tensors whatever the rank of the others.
    parts = [t for t in tensors if not (ndim != 1 and t.ndim == 1 and _is_zero(t.shape[0]))]
    return b.op("Concat", [b.as_dtype(t, dtype) for t in parts], axis=_dim(dim, ndim))


def _is_zero(size) -> bool:
    return not is_symbolic(size) and size == 0


@converts(aten.split_with_sizes.default, aten.split.Tensor)
def split(b: GraphBuilder, node, x: Value, split, dim: int = 0) -> list[str]:
    dim = _dim(dim, x.ndim)
    sizes = [part.shape[dim] for part in meta_of(node)]  # as many as the graph has outputs
    if len(sizes) == 1:
        return [x.name]
    return b.op("Split", [x.name, b.ints(sizes)], outputs=len(sizes), axis=dim)


@converts(aten.unbind.int)
def unbind(b: GraphBuilder, node, x: Value, dim: int = 0) -> list[str]:
    dim = _dim(dim, x.ndim)
    count = len(meta_of(node))
    parts = (
        [x.name]
        if count == 1
        else b.op("Split", [x.name, b.ints([1] * count)], outputs=count, axis=dim)
    )
    return [b.reshape(p, out_shape(node, i)) for i, p in enumerate(parts)]


@converts(aten.flip.default)
def flip(b: GraphBuilder, node, x: Value, dims) -> str:
    axes = [_dim(d, x.ndim) for d in dims]
    n = len(axes)
    return b.op(
        "Slice",
        [x.name, b.ints([-1] * n), b.ints([-INT64_MAX] * n), b.ints(axes), b.ints([-1] * n)],
    )


@converts(aten.repeat.default)
def repeat(b: GraphBuilder, node, x: Value, repeats) -> str:
    leading = len(repeats) - x.ndim
    data = b.reshape(x.name, (1,) * leading + x.shape) if leading else x.name
    return b.op("Tile", [data, b.ints(repeats)])


@converts(aten.constant_pad_nd.default)
def constant_pad_nd(b: GraphBuilder, node, x: Value, pad, value: float = 0) -> str:
    begins, ends = [0] * x.ndim, [0] * x.ndim
    for i in range(len(pad) // 2):
        begins[x.ndim - 1 - i], ends[x.ndim - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return b.op("Pad", [x.name, b.ints(begins + ends), b.as_dtype(value, x.dtype)], mode="constant")


@converts(aten.index_select.default)
def index_select(b: GraphBuilder, node, x: Value, dim: int, index: Value) -> str:
    if x.ndim == 0:  # as gather
        return b.reshape(index_select(b, node, _as_1d(b, x), 0, index), out_shape(node))
    return b.op("Gather", [x.name, b.as_dtype(index, torch.int64)], axis=_dim(dim, x.ndim))


@converts(aten.embedding.default)
def embedding(b: GraphBuilder, node, weight: Value, indices: Value, *_, **__) -> str:
    return b.op("Gather", [weight.name, b.as_dtype(indices, torch.int64)], axis=0)


@converts(aten.gather.default)
def gather(
    b: GraphBuilder, node, x: Value, dim: int, index: Value, sparse_grad: bool = False
) -> str:
    if x.ndim == 0:  # torch gathers from a 0-dim tensor at dim 0 or -1; ONNX needs an axis
        return b.reshape(gather(b, node, _as_1d(b, x), 0, _as_1d(b, index)), out_shape(node))
    return b.op("GatherElements", [x.name, b.as_dtype(index, torch.int64)], axis=_dim(dim, x.ndim))


def _as_1d(b: GraphBuilder, x: Value) -> Value:
    """A 0-dim value as one of shape ``(1,)``."""
    return Value(b.reshape(x.name, [1]), x.dtype, (1,))


@converts(aten.scatter.value, aten.scatter.src, aten.scatter_add.default)
def scatter(b: GraphBuilder, node, x: Value, dim: int, index: Value, src) -> str:
    if x.ndim == 0:  # as gather
        src = _as_1d(b, src) if isinstance(src, Value) else src
        return b.reshape(scatter(b, node, _as_1d(b, x), 0, _as_1d(b, index), src), [])
    dtype = out_dtype(node)
    if isinstance(src, Value) and not same_sizes(src.shape, index.shape):
        src = Value(
            b.op(
                "Slice",
                [
                    src.name,
                    b.ints([0] * index.ndim),
                    b.ints(index.shape),
                    b.ints(range(index.ndim)),
                ],
            ),
            src.dtype,
            index.shape,
        )
    updates = b.as_dtype(src, dtype)
    if not isinstance(src, Value):
        updates = b.op("Expand", [updates, b.ints(index.shape)])
    reduction = "add" if node.target is aten.scatter_add.default else "none"
    return b.op(
        "ScatterElements",
        [b.as_dtype(x, dtype), b.as_dtype(index, torch.int64), updates],
        axis=_dim(dim, x.ndim),
        reduction=reduction,
    )


def _index_tensors(op: str, indices) -> list[tuple[int, Value]]:
    """The ``(dim, index tensor)`` pairs of ``x[..., i, ..., j, ...]``."""
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if any(i.dtype == torch.bool for _, i in given):
        raise NotImplementedYet(
            f"the onnxrt backend's {op} converter does not handle boolean masks"
        )
    return given


def _stacked_indices(b: GraphBuilder, x: Value, given) -> tuple[str, tuple[int, ...]]:
    """Broadcast index tensors, wrap negatives, stack them on a new last axis (GatherND form)."""
    shape = broadcast([i.shape for _, i in given])
    columns = []
    for dim, index in given:
        idx = b.op("Expand", [b.as_dtype(index, torch.int64), b.ints(shape)])
        negative = b.op("Less", [idx, b.const(0, torch.int64)])
        wrapped = b.op("Add", [idx, b.as_dtype(x.shape[dim], torch.int64)])
        idx = b.op("Where", [negative, wrapped, idx])
        columns.append(b.reshape(idx, (*shape, 1)))
    stacked = columns[0] if len(columns) == 1 else b.op("Concat", columns, axis=-1)
    return stacked, shape


def _indexed_first(b: GraphBuilder, x: Value, dims: list[int]) -> tuple[str, list[int]]:
    """``x`` transposed so that the indexed dims come first, and the remaining dims."""
    rest = [d for d in range(x.ndim) if d not in dims]
    if dims == list(range(len(dims))):
        return x.name, rest
    return b.op("Transpose", [x.name], perm=dims + rest), rest


def _torch_places_index_dims_at(dims: list[int]) -> int:
    """Where torch puts the broadcast index dims: in place if the indexed dims are adjacent."""
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    return dims[0] if adjacent else 0


@converts(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(b: GraphBuilder, node, x: Value, indices) -> str:
    given = _index_tensors("index", indices)
    if len(given) == 1:
        dim, idx = given[0]
        return b.op("Gather", [x.name, b.as_dtype(idx, torch.int64)], axis=dim)
    dims = [d for d, _ in given]
    data, rest = _indexed_first(b, x, dims)
    stacked, shape = _stacked_indices(b, x, given)
    gathered = b.op("GatherND", [data, stacked])
    at = _torch_places_index_dims_at(dims)
    if at == 0:
        return gathered
    # GatherND gives [*index_shape, *rest]; torch keeps rest[:at] in front.
    k = len(shape)
    perm = [*range(k, k + at), *range(k), *range(k + at, k + len(rest))]
    return b.op("Transpose", [gathered], perm=perm)


@converts(aten.index_put.default, aten._unsafe_index_put.default)
def index_put(
    b: GraphBuilder, node, x: Value, indices, values: Value, accumulate: bool = False
) -> str:
    dtype = out_dtype(node)
    given = _index_tensors("index_put", indices)
    dims = [d for d, _ in given]
    data, rest = _indexed_first(b, Value(b.as_dtype(x, dtype), dtype, x.shape), dims)
    stacked, shape = _stacked_indices(b, x, given)
    k, at = len(shape), _torch_places_index_dims_at(dims)
    rest_shape = [x.shape[d] for d in rest]
    torch_layout = [*rest_shape[:at], *shape, *rest_shape[at:]]
    updates = b.op("Expand", [b.as_dtype(values, dtype), b.ints(torch_layout)])
    if at:
        perm = [*range(at, at + k), *range(at), *range(at + k, len(torch_layout))]
        updates = b.op("Transpose", [updates], perm=perm)
    result = b.op("ScatterND", [data, stacked, updates], reduction="add" if accumulate else "none")
    if dims == list(range(len(dims))):
        return result
    order = dims + rest
    return b.op("Transpose", [result], perm=[order.index(d) for d in range(x.ndim)])


@converts(aten.copy.default)
def copy(b: GraphBuilder, node, x: Value, src: Value, non_blocking: bool = False) -> str:
    return b.op("Expand", [b.as_dtype(src, x.dtype), b.ints(x.shape)])


def _filled(b: GraphBuilder, node, value) -> str:
    return b.op("Expand", [b.as_dtype(value, out_dtype(node)), b.ints(out_shape(node))])


@converts(aten.full.default, aten.new_full.default)
def full(b: GraphBuilder, node, *args, **_) -> str:
    return _filled(b, node, args[-1])


@converts(aten.full_like.default)
def full_like(b: GraphBuilder, node, x: Value, fill_value, **_) -> str:
    return _filled(b, node, fill_value)


@converts(aten.fill.Scalar, aten.fill.Tensor)
def fill(b: GraphBuilder, node, x: Value, value) -> str:
    return _filled(b, node, value)


@converts(
    aten.zeros.default,
    aten.zeros_like.default,
    aten.new_zeros.default,
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.empty_strided.default,
    aten.empty_permuted.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
)
def zeros(b: GraphBuilder, node, *_, **__) -> str:
    """Zeros (uninitialised memory may hold anything, zeros included)."""
    return _filled(b, node, 0)


@converts(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def ones(b: GraphBuilder, node, *_, **__) -> str:
    return _filled(b, node, 1)


@converts(aten.scalar_tensor.default)
def scalar_tensor(b: GraphBuilder, node, value, **_) -> str:
    return b.const(value, out_dtype(node))


@converts(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(b: GraphBuilder, node, *args, **_) -> str:
    dtype = out_dtype(node)
    if not any(map(is_symbolic, args)):
        return b.const(to_numpy(torch.arange(*args, dtype=dtype)), dtype)
    if dtype not in RANGE_DTYPES:
        concrete(args, f"an arange of {dtype}")
    start, end, step = (0, *args, 1) if len(args) == 1 else (*args, 1)[:3]
    return b.op("Range", [b.as_dtype(v, dtype) for v in (start, end, step)])
