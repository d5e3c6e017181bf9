"""The loop-level IR: buffers, the values lowerings pass around, and the computations.

Few node kinds carry everything:

* a **Buffer** is storage with a :class:`Layout` (graph inputs, constants,
  computed buffers, outputs of extern aten calls);
* a **TensorValue** is what lowerings exchange: either a :class:`StorageView`
  (a strided window on a buffer: every view op on stored data is just new
  sizes/strides/offset, no copy) or a :class:`PointwiseValue` (a body
  ``index -> value`` not yet stored; views of it compose index functions);
* a **ComputedBuffer** stores a :class:`Pointwise`, :class:`Reduction` or
  :class:`Scatter` body;
* an **ExternKernel** calls an aten op from the wrapper (matmuls,
  convolutions, and every op without a lowering).

Lowerings write bodies as functions of an index that call ``ops.*``; a
computed buffer records its body once into a :class:`~.loop_body.LoopBody`
(an ops list ending in the store), which the scheduler and every code
generator read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .indexing import Expr, contiguous_strides, linear_index, make_vars
from .loop_body import LoopBody, Value, ops, record, reduction, store
from .sizes import Size, as_size, hint, strides_of

Index = list[Expr]
#: what lowerings pass around: a function of an index that calls ``ops.*``
Body = Callable[[Index], Value]


@dataclass(frozen=True)
class Layout:
    """Where the elements of a tensor live in its buffer's storage (sizes, strides and
    offset are ints, or sympy expressions where they are symbolic: :mod:`.sizes`)."""

    size: tuple[Size, ...]
    stride: tuple[Size, ...]
    dtype: torch.dtype
    device: torch.device
    offset: Size = 0

    @staticmethod
    def contiguous(size: Sequence[Size], dtype: torch.dtype, device: torch.device) -> Layout:
        size = tuple(as_size(s) for s in size)
        return Layout(size, contiguous_strides(size), dtype, device)

    @staticmethod
    def of_tensor(t: torch.Tensor) -> Layout:
        return Layout(
            tuple(as_size(s) for s in t.shape),
            strides_of(t),
            t.dtype,
            t.device,
            0,
        )

    def index(self, index: Index) -> Expr:
        return linear_index(index, self.stride, self.offset)

    def storage_numel(self) -> Size:
        if any(s == 0 for s in self.size):
            return 0
        return as_size(self.offset + 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride)))

    def nbytes(self) -> Size:
        return as_size(self.storage_numel() * self.dtype.itemsize)


class Buffer:
    """Named storage the wrapper allocates or receives."""

    def __init__(self, name: str, layout: Layout):
        self.name = name
        self.layout = layout

    @property
    def dtype(self) -> torch.dtype:
        return self.layout.dtype

    def __repr__(self) -> str:
        lay = self.layout
        return f"{type(self).__name__}({self.name}, size={list(lay.size)}, stride={list(lay.stride)}, {lay.dtype})"


class InputBuffer(Buffer):
    """A graph input (``position`` in the flat argument list)."""

    def __init__(self, name: str, layout: Layout, position: int):
        super().__init__(name, layout)
        self.position = position


class ConstantBuffer(Buffer):
    """A tensor baked into the compiled graph (attributes, folded constants)."""

    def __init__(self, name: str, value: torch.Tensor):
        super().__init__(name, Layout.of_tensor(value))
        self.value = value


@dataclass
class Pointwise:
    """``out[index] = value(index)`` over ``ranges`` (index variables ``x*``)."""

    ranges: tuple[Size, ...]
    body: LoopBody
    dtype: torch.dtype


@dataclass
class Reduction:
    """``out[index] = reduce(value(index, rindex) for rindex in reduction_ranges)``.

    Index variables ``x*`` and ``r*``. ``welford`` accumulates (mean, m2, count)
    in one pass and yields the entry ``output_index``; ``argmax``/``argmin``
    yield the flat position within ``reduction_ranges``.
    """

    ranges: tuple[Size, ...]
    reduction_ranges: tuple[Size, ...]
    body: LoopBody
    reduction_type: str
    dtype: torch.dtype
    src_dtype: torch.dtype
    output_index: int = 0


@dataclass
class Scatter:
    """``target[dest(index)] (+)= value(index)`` over ``ranges``, in place in ``target``'s storage.

    The buffer holding this data is an alias of ``target`` after the writes;
    ``mode`` is None (assign) or ``"add"`` (accumulate, as index_put/scatter_add).
    Scatters run serially, in index order, so duplicates resolve as in eager.
    """

    ranges: tuple[Size, ...]
    body: LoopBody
    target: str
    mode: str | None
    dtype: torch.dtype


class ComputedBuffer(Buffer):
    """A buffer whose contents a generated kernel computes."""

    def __init__(self, name: str, layout: Layout, data: Pointwise | Reduction | Scatter):
        super().__init__(name, layout)
        self.data = data
        #: the aten op whose lowering made it (``relu``, ``native_batch_norm_backward``)
        self.origin = ""

    @staticmethod
    def pointwise(
        name: str, layout: Layout, ranges: Sequence[int], value: Body, dtype: torch.dtype
    ) -> ComputedBuffer:
        ranges = tuple(ranges)
        index = make_vars("x", ranges)
        body = record(lambda: store(name, layout.index(index), value(index)))
        return ComputedBuffer(name, layout, Pointwise(ranges, body, dtype))

    @staticmethod
    def reduction(
        name: str,
        layout: Layout,
        ranges: Sequence[int],
        reduction_ranges: Sequence[int],
        value: Callable[[Index, Index], Value],
        reduction_type: str,
        dtype: torch.dtype,
        src_dtype: torch.dtype,
        output_index: int = 0,
    ) -> ComputedBuffer:
        ranges, reduction_ranges = tuple(ranges), tuple(reduction_ranges)
        index, rindex = make_vars("x", ranges), make_vars("r", reduction_ranges)
        position = None
        if reduction_type in ("argmax", "argmin"):
            position = linear_index(rindex, contiguous_strides(reduction_ranges))

        def run() -> None:
            result = reduction(reduction_type, value(index, rindex), dtype, position)
            store(name, layout.index(index), result)

        data = Reduction(
            ranges, reduction_ranges, record(run), reduction_type, dtype, src_dtype, output_index
        )
        return ComputedBuffer(name, layout, data)

    @staticmethod
    def scatter(
        name: str,
        target: Buffer,
        ranges: Sequence[int],
        value: Body,
        dest: Callable[[Index], Index],
        mode: str | None,
        dtype: torch.dtype,
    ) -> ComputedBuffer:
        ranges = tuple(ranges)
        index = make_vars("x", ranges)

        def run() -> None:
            v = value(index)
            store(target.name, target.layout.index(dest(index)), v, mode)

        data = Scatter(ranges, record(run), target.name, mode, dtype)
        return ComputedBuffer(name, target.layout, data)

    @property
    def body(self) -> LoopBody:
        return self.data.body

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.data, Reduction)

    @property
    def is_scatter(self) -> bool:
        return isinstance(self.data, Scatter)

    def loop_order(self) -> list[int]:
        """Pointwise dims ordered outermost first by decreasing stride (contiguous stores)."""
        if isinstance(self.data, Scatter):
            return list(range(len(self.data.ranges)))
        dims = list(range(len(self.layout.size)))
        if self.is_reduction:
            return dims
        return sorted(dims, key=lambda d: -hint(self.layout.stride[d]))


@dataclass
class ExternArg:
    """How an extern call receives one argument: a tensor view, a list, or a constant."""

    kind: str  # "tensor" | "list" | "const"
    value: Any


class ExternKernel(Buffer):
    """An aten call made by the wrapper; ``layout`` is None when it returns a tuple."""

    def __init__(
        self,
        name: str,
        layout: Layout | None,
        op: Any,
        args: list[ExternArg],
        kwargs: dict[str, ExternArg],
        reason: str,
        mutates: bool = False,
    ):
        super().__init__(name, layout)  # type: ignore[arg-type]
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.reason = reason
        self.mutates = mutates
        self.outputs: list[MultiOutput] = []

    def tensor_args(self) -> list[StorageView]:
        out: list[StorageView] = []
        for arg in [*self.args, *self.kwargs.values()]:
            if arg.kind == "tensor":
                out.append(arg.value)
            elif arg.kind == "list":
                out.extend(v for v in arg.value if isinstance(v, StorageView))
        return out


class MultiOutput(Buffer):
    """Entry ``index`` of a tuple returned by an extern call."""

    def __init__(self, name: str, layout: Layout, parent: ExternKernel, index: int):
        super().__init__(name, layout)
        self.parent = parent
        self.index = index


# ---------------------------------------------------------------------------
# Values exchanged by lowerings
# ---------------------------------------------------------------------------


class TensorValue:
    """A tensor during lowering: sizes, dtype, device and a way to read elements."""

    size: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    def loader(self) -> Body:
        raise NotImplementedError


class StorageView(TensorValue):
    """A strided window on a buffer's storage."""

    def __init__(self, buffer: Buffer, size, stride, offset: Size = 0):
        self.buffer = buffer
        self.size = tuple(as_size(s) for s in size)
        self.stride = tuple(as_size(s) for s in stride)
        self.offset = as_size(offset)
        self.dtype = buffer.layout.dtype
        self.device = buffer.layout.device

    @staticmethod
    def of(buffer: Buffer) -> StorageView:
        lay = buffer.layout
        return StorageView(buffer, lay.size, lay.stride, lay.offset)

    def layout(self) -> Layout:
        return Layout(self.size, self.stride, self.dtype, self.device, self.offset)

    def is_whole_buffer(self) -> bool:
        return self.layout() == self.buffer.layout

    def loader(self) -> Body:
        name, lay = self.buffer.name, self.layout()

        def load(index: Index) -> Value:
            return ops.load(name, lay.index(index), lay.dtype)

        return load

    def __repr__(self) -> str:
        return f"StorageView({self.buffer.name}, {list(self.size)}, {list(self.stride)}, +{self.offset})"


class PointwiseValue(TensorValue):
    """A not-yet-stored elementwise body; ``cost`` estimates its ops per element."""

    def __init__(self, size, dtype: torch.dtype, device: torch.device, body: Body, cost: int = 1):
        self.size = tuple(as_size(s) for s in size)
        self.dtype = dtype
        self.device = device
        self.body = body
        self.cost = cost

    def loader(self) -> Body:
        return self.body

    def __repr__(self) -> str:
        return f"PointwiseValue({list(self.size)}, {self.dtype}, cost={self.cost})"


@dataclass
class GraphIR:
    """Everything lowering produced for one graph, in program order."""

    inputs: list[InputBuffer] = field(default_factory=list)
    constants: list[ConstantBuffer] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)  # computed and extern, in order
    outputs: list[Any] = field(default_factory=list)  # StorageView | python scalar | None
    seed_buffer: InputBuffer | None = None
    num_seeds: int = 0
    fallbacks: dict[str, str] = field(default_factory=dict)  # op name -> reason
    #: where the wrapper reads each size symbol: ``arg0.size(1)``, ``arg2`` (a SymInt input),
    #: ``buf3.size(0)`` (an unbacked one: the size of an aten call's result)
    size_sources: dict[Any, str] = field(default_factory=dict)
    #: the aten call (its buffer's name) whose result gives each unbacked size symbol: the
    #: symbol exists from that call on
    size_definers: dict[Any, str] = field(default_factory=dict)

    def buffer(self, name: str) -> Buffer:
        for buf in (*self.inputs, *self.constants, *self.buffers):
            if buf.name == name:
                return buf
        if self.seed_buffer is not None and self.seed_buffer.name == name:
            return self.seed_buffer
        raise KeyError(name)

    def describe(self) -> str:
        """Readable listing of the IR (for trace folders and debugging)."""
        lines = [f"input {b!r}" for b in self.inputs]
        lines += [f"constant {b!r}" for b in self.constants]
        for buf in self.buffers:
            if isinstance(buf, ComputedBuffer):
                d = buf.data
                kind = f"pointwise over {list(d.ranges)}"
                if isinstance(d, Reduction):
                    kind = (
                        f"reduction {d.reduction_type}[{d.output_index}] over {list(d.ranges)}"
                        f" x {list(d.reduction_ranges)}"
                    )
                elif isinstance(d, Scatter):
                    kind = f"scatter ({d.mode or 'assign'}) into {d.target} over {list(d.ranges)}"
                lines.append(f"{buf!r}: {kind}")
                lines += ["    " + line for line in d.body.lines()]
            elif isinstance(buf, ExternKernel):
                lines.append(f"{buf.name} = extern {buf.op} ({buf.reason})")
            else:
                lines.append(repr(buf))
        lines.append(f"outputs {self.outputs}")
        return "\n".join(lines)
