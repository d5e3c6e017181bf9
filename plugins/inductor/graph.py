"""Lowering an aten FX graph to the loop IR.

:class:`GraphLowering` interprets the graph (``torch.fx.Interpreter``): each
placeholder becomes an input buffer, each call the result of its lowering in
:mod:`.lowering` (a :class:`~.ir.TensorValue`), and any op without a lowering,
or with an argument combination its lowering does not handle, becomes an
:class:`~.ir.ExternKernel` aten call. Elementwise values stay unstored and are
inlined into their consumers, unless they are expensive and used more than
once (then they are *realized* into a buffer). Output values are stored with
the strides eager would give them, except values saved for backward (past
``gm.meta["num_user_outputs"]``), which keep ours: the AOT layer compiles the
backward for the strides the forward produced.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import GraphModule, Interpreter, Node
from torch.fx.experimental.symbolic_shapes import CallMethodKey
from torch.utils import _pytree as pytree

from torchkiln.exc import NotImplementedYet

from .device import DeviceCaps, device_caps
from .indexing import Expr, Var, make_vars
from .ir import (
    ComputedBuffer,
    ConstantBuffer,
    ExternArg,
    ExternKernel,
    GraphIR,
    Index,
    InputBuffer,
    Layout,
    MultiOutput,
    PointwiseValue,
    StorageView,
    TensorValue,
)
from .loop_body import Value, record, store
from .lowering import LOWERINGS, RANDOM_OPS, Unlowerable
from .sizes import SymbolicUnsupported, as_size, hint, is_static, sizes_of, strides_of

#: 2-D convolutions run on channels-last tensors where the device prefers it
#: (:attr:`.device.DeviceCaps.channels_last_conv`)
CONVOLUTION = torch.ops.aten.convolution.default
CONVOLUTION_BACKWARD = torch.ops.aten.convolution_backward.default

_aten = torch.ops.aten
#: aten calls that take their tensor arguments in any strides at no cost (cuBLAS reads a
#: transposed matrix as it is): a pointwise argument is stored in the order it reads
#: (:attr:`.device.DeviceCaps.store_in_read_order`)
ANY_STRIDES = frozenset(
    {_aten.mm.default, _aten.bmm.default, _aten.addmm.default, _aten.baddbmm.default}
)
#: aten calls that must get their tensor arguments in the strides tracing saw: the CUDA
#: attention kernels check the alignment of the bias's strides, which eager's composite
#: ``scaled_dot_product_attention`` pads for them (a padded tensor, then a slice of it);
#: ``as_strided`` addresses the storage by the traced strides
STRIDE_SENSITIVE = frozenset(
    {
        _aten.as_strided.default,
        _aten._scaled_dot_product_efficient_attention.default,
        _aten._scaled_dot_product_efficient_attention_backward.default,
        _aten._scaled_dot_product_flash_attention.default,
        _aten._scaled_dot_product_flash_attention_backward.default,
        _aten._scaled_dot_product_cudnn_attention.default,
        _aten._scaled_dot_product_cudnn_attention_backward.default,
    }
)

#: realize an elementwise value used by several consumers once it costs this much
REUSE_COST = 4
#: ... or once it reads this many buffers of its own size: inlined into every consumer,
#: it would keep all of them alive until the last consumer runs (a transformer's residual
#: stream ``h + attn``, ``+ mlp``, ``+ attn`` ... held every block's output)
REUSE_FULL_READS = 2
#: never inline bodies costlier than this (keeps kernels and compile time bounded)
MAX_INLINE_COST = 48


class GraphLowering(Interpreter):
    def __init__(
        self,
        gm: GraphModule,
        example_inputs: list[Any],
        caps: DeviceCaps,
        fallback_random: bool = False,
    ):
        super().__init__(gm, garbage_collect_values=False)
        self.example_inputs = list(example_inputs)
        self.caps = caps
        self.fallback_random = fallback_random
        self.ir = GraphIR()
        self.current_node: Node | None = None
        self._counter = 0
        self._position = 0
        # outputs past these are saved for backward (see torchkiln.aot): any layout will do
        self.num_user_outputs: int | None = gm.meta.get("num_user_outputs")
        # graphs with 2-D convolutions keep their 4-D intermediates channels-last
        self.channels_last = caps.channels_last_conv and any(_is_conv2d(n) for n in gm.graph.nodes)
        # inputs the forward saves for backward, and their channels-last copies made here
        self._saved_inputs = _saved_inputs(gm, self.num_user_outputs)
        self._user_outputs = _user_outputs(gm, self.num_user_outputs)
        self._channels_last_inputs: dict[Node, StorageView] = {}

    # -- public ---------------------------------------------------------------
    def lower(self) -> GraphIR:
        self.run(*self.example_inputs)
        if self.ir.seed_buffer is not None:
            self.ir.seed_buffer.layout = Layout.contiguous(
                (self.ir.num_seeds,), torch.int64, self.ir.seed_buffer.layout.device
            )
        return self.ir

    def new_name(self, prefix: str = "buf") -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def realize(self, value: TensorValue, layout: Layout | None = None) -> StorageView:
        """Store ``value`` in a buffer (no-op for values already in storage)."""
        if isinstance(value, StorageView) and (layout is None or value.layout() == layout):
            return value
        layout = layout or self._default_layout(value)
        buf = ComputedBuffer.pointwise(
            self.new_name(), layout, value.size, value.loader(), value.dtype
        )
        self.ir.buffers.append(buf)
        return StorageView.of(buf)

    def _default_layout(self, value: TensorValue) -> Layout:
        if self.channels_last and len(value.size) == 4:
            return channels_last_layout(value.size, value.dtype, value.device)
        return Layout.contiguous(value.size, value.dtype, value.device)

    def reduction(
        self,
        device: torch.device,
        ranges: tuple[int, ...],
        reduction_ranges: tuple[int, ...],
        value: Callable[[Index, Index], Value],
        reduction_type: str,
        dtype: torch.dtype,
        src_dtype: torch.dtype,
        output_index: int = 0,
    ) -> StorageView:
        """Store a reduction (see :meth:`.ir.ComputedBuffer.reduction`) in a contiguous buffer."""
        layout = Layout.contiguous(ranges, dtype, device)
        buf = ComputedBuffer.reduction(
            self.new_name(),
            layout,
            ranges,
            reduction_ranges,
            value,
            reduction_type,
            dtype,
            src_dtype,
            output_index,
        )
        self.ir.buffers.append(buf)
        return StorageView.of(buf)

    def scatter(
        self,
        target: StorageView,
        ranges: tuple[int, ...],
        value: Callable[[Index], Value],
        dest: Callable[[Index], Index],
        mode: str | None,
        dtype: torch.dtype,
    ) -> StorageView:
        """Write ``value(i)`` at ``dest(i)`` of ``target``'s buffer, in place (an alias of it)."""
        buf = ComputedBuffer.scatter(
            self.new_name(), target.buffer, ranges, value, dest, mode, dtype
        )
        self.ir.buffers.append(buf)
        return StorageView.of(buf)

    def reuse(self, value: TensorValue, cost: int = REUSE_COST) -> TensorValue:
        """A value read several times: store it first if recomputing it is costly."""
        if isinstance(value, PointwiseValue) and value.cost >= cost:
            return self.realize(value)
        return value

    def new_seed(self, device: torch.device) -> tuple[str, int]:
        """A seed number of the graph's seeds buffer (drawn per call, on the kernels' ``device``)."""
        if self.ir.seed_buffer is None:
            self.ir.seed_buffer = InputBuffer(
                "seeds", Layout.contiguous((0,), torch.int64, device), -1
            )
        self.ir.num_seeds += 1
        return self.ir.seed_buffer.name, self.ir.num_seeds - 1

    # -- interpreter hooks -------------------------------------------------------
    def run_node(self, n: Node) -> Any:
        self.current_node = n
        first_new = len(self.ir.buffers)
        out = super().run_node(n)
        if isinstance(out, PointwiseValue):
            users = len(n.users)
            if out.cost > MAX_INLINE_COST or (
                users > 1
                and (out.cost >= REUSE_COST or self._full_size_reads(out) >= REUSE_FULL_READS)
            ):
                # a value the caller gets is stored as eager would lay it out, here as at
                # ``output`` (its other readers made it a buffer first)
                layout = _traced_layout(out, n.meta.get("val")) if n in self._user_outputs else None
                out = self.realize(out, layout)
        origin = _op_name(n)  # what kernel names and profiles show
        for buf in self.ir.buffers[first_new:]:
            buf.origin = origin
        return out

    def _full_size_reads(self, value: PointwiseValue) -> int:
        """How many buffers of at least ``value``'s size its body reads (broadcast ones
        such as a bias do not count: they are small, and alive anyway)."""
        index = make_vars("x", value.size)
        body = record(lambda: store("out", Expr.of(0), value.body(index)))
        numel = hint(as_size(math.prod(value.size)))
        names = {name for name, _ in body.loads()}
        return sum(
            hint(as_size(math.prod(self.ir.buffer(name).layout.size))) >= numel for name in names
        )

    def placeholder(self, target, args, kwargs) -> Any:
        example = self.example_inputs[self._position]
        position = self._position
        self._position += 1
        if isinstance(example, (torch.SymInt, torch.SymFloat)):
            # a number the forward saved (a size, ``1 / numel``): its expression in the size
            # symbols, never its value at the first call's sizes
            size = as_size(example)
            if not is_static(size) and size.is_Symbol:
                self.ir.size_sources.setdefault(size, f"arg{position}")
            return size
        if not isinstance(example, torch.Tensor):
            return example
        device_caps(example.device)  # refuses devices without a code generator
        buf = InputBuffer(f"arg{position}", Layout.of_tensor(example), position)
        self.ir.inputs.append(buf)
        for what, sizes in (("size", buf.layout.size), ("stride", buf.layout.stride)):
            for dim, size in enumerate(sizes):
                if not is_static(size) and size.is_Symbol:
                    self.ir.size_sources.setdefault(size, f"arg{position}.{what}({dim})")
        return StorageView.of(buf)

    def get_attr(self, target, args, kwargs) -> Any:
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor):
            device_caps(value.device)
            buf = ConstantBuffer(self.new_name("const"), value)
            self.ir.constants.append(buf)
            return StorageView.of(buf)
        return value

    def call_function(self, target, args, kwargs) -> Any:
        if target is operator.getitem and isinstance(args[0], (list, tuple)):
            return args[0][args[1]]
        meta = self.current_node.meta.get("val") if self.current_node is not None else None
        if isinstance(meta, (torch.SymInt, torch.SymFloat)):  # the ShapeEnv computed it:
            return as_size(meta)  # ``sym_size``, ``s0*s1``, ``1 / (s0*s1)``
        if self.channels_last and self.current_node is not None and _is_conv2d(self.current_node):
            if target is CONVOLUTION_BACKWARD:
                return self._conv_backward(args, kwargs, meta)
            return self._conv_channels_last(args, kwargs, meta)
        reason = self._why_not_lowered(target, args, kwargs, meta)
        if reason is None and self.current_node.meta.get("unbacked_bindings"):
            # the wrapper reads the sizes off the aten call's result (see ``fallback``)
            reason = "its output size depends on the data"
        if reason is None:
            try:
                return LOWERINGS[target](self, meta, *args, **kwargs)
            except Unlowerable as e:
                reason = str(e)
        if target in STRIDE_SENSITIVE:
            args = self._in_traced_layout(args, self.current_node.args)
        return self.fallback(target, args, kwargs, meta, reason)

    def _in_traced_layout(self, args: tuple, nodes: tuple) -> tuple:
        """Each tensor argument stored with the size and strides its node had when traced."""
        out = []
        for value, node in zip(args, nodes):
            meta = node.meta.get("val") if isinstance(node, Node) else None
            if isinstance(value, TensorValue) and isinstance(meta, torch.Tensor):
                layout = Layout(sizes_of(meta.shape), strides_of(meta), value.dtype, value.device)
                value = self.realize(value, layout)
            out.append(value)
        return tuple(out)

    def output(self, target, args, kwargs) -> Any:
        values = args[0]
        metas = self.current_node.args[0] if self.current_node is not None else None
        single = not isinstance(values, (list, tuple))
        if single:
            values, metas = [values], [metas]
        for index, (value, meta_node) in enumerate(zip(values, metas)):
            meta = meta_node.meta.get("val") if isinstance(meta_node, Node) else None
            if not isinstance(value, TensorValue):
                pass  # a number: a size saved for backward, a scalar result
            elif self.num_user_outputs is not None and index >= self.num_user_outputs:
                # saved for backward: kept in our layout (a weight in its converted one)
                value = self._channels_last_inputs.get(meta_node) or self.realize(value)
            elif isinstance(value, PointwiseValue):
                value = self.realize(value, _traced_layout(value, meta))
            elif self.channels_last and isinstance(value, StorageView):
                value = self._eager_strides(value, meta)
            self.ir.outputs.append(value)
        return values

    def _conv_channels_last(self, args, kwargs, meta: torch.Tensor) -> StorageView:
        """The convolution as an aten call on channels-last input and weight (a copy kernel
        where they are not, which fuses into the producer's kernel); it returns channels-last."""
        x, weight, *rest = args
        x = self.realize(x, channels_last_layout(x.size, x.dtype, x.device))
        weight_node = self.current_node.args[1]
        # a weight the backward reads channels-last too is converted here once and saved
        # converted: the library would convert it again in the backward, with a copy of its own
        save = weight_node in self._saved_inputs and _channels_last_backward_is_safe(
            weight.size, rest[1], rest[2], weight.device
        )
        if weight_node in self._channels_last_inputs:
            weight = self._channels_last_inputs[weight_node]
        elif save or not self._library_converts(weight):
            weight = self.realize(
                weight, channels_last_layout(weight.size, weight.dtype, weight.device)
            )
            if save:
                self._channels_last_inputs[weight_node] = weight
        layout = channels_last_layout(sizes_of(meta.shape), meta.dtype, meta.device)
        return self.fallback(CONVOLUTION, (x, weight, *rest), kwargs, meta, "extern kernel", layout)

    def _conv_backward(self, args, kwargs, meta: list) -> list:
        """convolution_backward as an aten call on channels-last tensors (contiguous ones where
        that layout is broken, see :func:`_channels_last_backward_is_safe`); its input and
        weight gradients come back in the same layout."""
        weight, stride, padding = args[2], args[4], args[5]
        safe = _channels_last_backward_is_safe(weight.size, stride, padding, weight.device)
        layout_of = channels_last_layout if safe else Layout.contiguous
        grad_output, x, weight, *rest = (
            self.realize(v, layout_of(v.size, v.dtype, v.device))
            if isinstance(v, TensorValue) and not (v is args[2] and self._library_converts(v))
            else v
            for v in args
        )
        results = self.fallback(
            CONVOLUTION_BACKWARD, (grad_output, x, weight, *rest), kwargs, meta, "extern kernel"
        )
        for i, result in enumerate(results[:2]):
            if result is not None:
                result.buffer.layout = layout_of(result.size, result.dtype, result.device)
                results[i] = StorageView.of(result.buffer)
        return results

    def _library_converts(self, weight: TensorValue) -> bool:
        """Whether a convolution's ``weight`` goes to the library as it is: a graph input,
        where the device's library converts its layout itself (see ``DeviceCaps``). cuDNN
        only: oneDNN's backward has layout bugs (:func:`_channels_last_backward_is_safe`)."""
        return (
            self.caps.library_converts_input_weights
            and weight.device.type == "cuda"
            and isinstance(weight, StorageView)
            and isinstance(weight.buffer, InputBuffer)
        )

    def _eager_strides(self, value: StorageView, meta: Any) -> StorageView:
        """A 4-D output made channels-last here, copied back to the strides eager gives it."""
        if not isinstance(meta, torch.Tensor) or len(value.size) != 4:
            return value
        layout = Layout(sizes_of(meta.shape), strides_of(meta), value.dtype, value.device)
        if value.layout() == layout or value.layout() != self._default_layout(value):
            return value
        return self.realize(value, layout)

    # -- fallbacks -------------------------------------------------------------------
    def _why_not_lowered(self, target, args, kwargs, meta) -> str | None:
        if target in self.caps.extern_ops:
            return "extern kernel"
        if target not in LOWERINGS:
            return "no lowering"
        if self.fallback_random and target in RANDOM_OPS:
            return "fallback_random=True"
        if not self.caps.random and target in RANDOM_OPS:
            return f"the {self.caps.name} code generator has no random ops yet"
        if meta is None:
            return "no shape information on the node"
        for value in _flat_values((args, kwargs, meta)):
            if isinstance(value, (TensorValue, torch.Tensor)) and not self.caps.supports_dtype(
                value.dtype
            ):
                return f"dtype {value.dtype} has no {self.caps.name} lowering"
        return None

    def fallback(
        self, target, args, kwargs, meta, reason: str, layout: Layout | None = None
    ) -> Any:
        """Run ``target`` as an aten call from the wrapper (``layout``: of its tensor result,
        if not the one eager gives)."""
        op_name = str(target)
        if reason != "extern kernel":
            self.ir.fallbacks.setdefault(op_name, reason)
        mutates = bool(getattr(getattr(target, "_schema", None), "is_mutable", False))
        any_strides = self.caps.store_in_read_order and target in ANY_STRIDES
        ext_args = [self._extern_arg(a, any_strides) for a in args]
        ext_kwargs = {k: self._extern_arg(v) for k, v in kwargs.items()}
        name = self.new_name()
        if isinstance(meta, torch.Tensor):
            layout = layout or Layout.of_tensor(meta)
            ext = ExternKernel(name, layout, target, ext_args, ext_kwargs, reason, mutates)
            self.ir.buffers.append(ext)
            result = StorageView.of(ext)
            self._define_unbacked(ext, result)
            return result
        ext = ExternKernel(name, None, target, ext_args, ext_kwargs, reason, mutates)
        self.ir.buffers.append(ext)
        if isinstance(meta, (list, tuple)):
            results = self._tuple_results(ext, meta)
            self._define_unbacked(ext, results)
            return results
        if meta is None:
            ext.mutates = True
            return None
        raise NotImplementedYet(
            f"{op_name} returns a Python scalar ({type(meta).__name__}); the inductor backend "
            "cannot use run-time scalars yet"
        )

    def _tuple_results(self, ext: ExternKernel, meta: list | tuple) -> list:
        """The entries of an aten call's tuple result: views of its tensors, numbers."""
        results = []
        for i, m in enumerate(meta):
            if isinstance(m, torch.Tensor):
                out = MultiOutput(self.new_name(), Layout.of_tensor(m), ext, i)
                ext.outputs.append(out)
                self.ir.buffers.append(out)
                results.append(StorageView.of(out))
            elif m is None or type(m) in (int, float, bool):
                # a plain number beside tensors (attention's max sequence lengths) comes
                # from the static shapes tracing saw: the same on every call of this graph
                results.append(m)
            elif isinstance(m, (torch.SymInt, torch.SymFloat)):
                results.append(as_size(m))  # the same, of symbolic sizes: an expression
            else:
                raise NotImplementedYet(
                    f"{ext.op} returns a {type(m).__name__} inside a tuple; the inductor "
                    "backend only runs such ops with tensor and number results"
                )
        return results

    def _define_unbacked(self, ext: ExternKernel, result: Any) -> None:
        """Record where the wrapper reads the sizes only ``ext``'s result gives (the node's
        ``unbacked_bindings``: ``u0`` at ``.size(0)`` of ``nonzero``'s result), right after
        the call."""
        bindings = self.current_node.meta.get("unbacked_bindings") or {}
        for symbol, path in bindings.items():
            self.ir.size_sources[symbol] = _source_at(result, path, ext.op)
            self.ir.size_definers[symbol] = ext.name

    def _extern_arg(self, value: Any, any_strides: bool = False) -> ExternArg:
        if isinstance(value, PointwiseValue) and any_strides:
            return ExternArg("tensor", self.realize(value, _read_order_layout(value)))
        if isinstance(value, TensorValue):
            return ExternArg("tensor", self.realize(value))
        if isinstance(value, (list, tuple)) and any(isinstance(v, TensorValue) for v in value):
            return ExternArg(
                "list", [self.realize(v) if isinstance(v, TensorValue) else v for v in value]
            )
        return ExternArg("const", value)


def _source_at(result: Any, path: tuple, op: Any) -> str:
    """Python text reading the size at ``path`` (a ``unbacked_bindings`` key path) of an aten
    call's ``result``: ``buf3.size(0)``, ``buf5.stride(1)``."""
    keys = list(path)
    if keys and isinstance(keys[0], pytree.SequenceKey) and isinstance(result, list):
        result = result[keys.pop(0).idx]
    if not isinstance(result, StorageView):
        raise SymbolicUnsupported(f"{op} gives a size the inductor can't read at {path}")
    match keys:
        case [CallMethodKey("size" | "stride" as method), pytree.SequenceKey(idx)]:
            return f"{result.buffer.name}.{method}({idx})"
        case [CallMethodKey("storage_offset")]:
            return f"{result.buffer.name}.storage_offset()"
    raise SymbolicUnsupported(f"{op} gives a size the inductor can't read at {path}")


def _traced_layout(value: PointwiseValue, meta: Any) -> Layout | None:
    """The layout tracing gave ``value`` (eager's strides), where ``meta`` has its sizes."""
    if not isinstance(meta, torch.Tensor) or sizes_of(meta.shape) != value.size:
        return None
    return Layout(sizes_of(meta.shape), strides_of(meta), value.dtype, value.device)


def _read_order_layout(value: PointwiseValue) -> Layout | None:
    """The layout that stores ``value`` in the memory order of its first read of all its
    dimensions (a transposed product stored transposed), so that the kernel making it reads
    and writes in the same order; None (contiguous) where no read gives one."""
    index = make_vars("d", value.size)
    body = record(lambda: store("value", Expr(), value.loader()(index)))
    dims = [e.single_atom() for e in index]  # None for a size-1 dimension
    for _, read in body.loads():
        if any(not isinstance(atom, Var) for atom, _ in read.terms):
            continue
        coefficients = [read.coefficient(d) if d is not None else 0 for d in dims]
        if any(c <= 0 for c, d in zip(coefficients, dims) if d is not None):
            continue
        strides, step = [0] * len(dims), 1
        for d in sorted(range(len(dims)), key=lambda d: coefficients[d]):
            strides[d], step = step, step * value.size[d]
        return Layout(value.size, tuple(strides), value.dtype, value.device)
    return None


def _user_outputs(gm: GraphModule, num_user_outputs: int | None) -> set[Node]:
    """The nodes the graph returns to its caller (not those saved for backward)."""
    outputs = gm.graph.output_node().args[0]
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    if num_user_outputs is not None:
        outputs = outputs[:num_user_outputs]
    return {n for n in outputs if isinstance(n, Node)}


def _saved_inputs(gm: GraphModule, num_user_outputs: int | None) -> set[Node]:
    """The placeholders a forward graph returns past its user outputs (saved for backward)."""
    if num_user_outputs is None:
        return set()
    outputs = gm.graph.find_nodes(op="output")[0].args[0]
    saved = outputs[num_user_outputs:] if isinstance(outputs, (list, tuple)) else ()
    return {n for n in saved if isinstance(n, Node) and n.op == "placeholder"}


def _op_name(node: Node) -> str:
    """A short name of the op ``node`` calls: ``convolution_backward`` for its overload;
    nothing for placeholders and outputs."""
    if node.op != "call_function":
        return ""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    return (getattr(packet or target, "__name__", None) or str(target)).strip("_")


def channels_last_layout(size, dtype: torch.dtype, device: torch.device) -> Layout:
    """NCHW sizes, NHWC order in memory (torch.channels_last)."""
    n, c, h, w = sizes_of(size)
    return Layout((n, c, h, w), sizes_of((h * w * c, 1, w * c, c)), dtype, device)


def _channels_last_backward_is_safe(kernel_size, stride, padding, device) -> bool:
    """Whether convolution_backward gets channels-last tensors right. PyTorch 2.13's CPU
    (oneDNN) kernel for an unpadded 1x1 convolution with a stride (ResNet/RepVGG
    downsampling) on channels-last tensors gives wrong weight gradients and writes past its
    buffers (double free, segfault); on contiguous ones, the layout eager autograd uses
    there, it is right. Padded or unstrided 1x1 and larger kernels were right in every case
    tried. cuDNN has no such bug: on a GPU, contiguous operands there cost a layout
    conversion on each side of the call (ResNet-18 training: 10 cuDNN transposes a step)."""
    if device.type != "cpu":
        return True
    one_by_one = all(k == 1 for k in kernel_size[2:])
    strided = any(s != 1 for s in stride)
    return not (one_by_one and strided and all(p == 0 for p in padding))


def _is_conv2d(node: Node) -> bool:
    """A 2-D, non-transposed convolution (or its backward) of a float tensor."""
    if node.target is CONVOLUTION:
        meta = node.meta.get("val")
        transposed = node.args[6] if len(node.args) > 6 else False
    elif node.target is CONVOLUTION_BACKWARD:
        meta = node.args[0].meta.get("val")  # grad_output
        transposed = node.args[7]
    else:
        return False
    return (
        isinstance(meta, torch.Tensor)
        and meta.dim() == 4
        and meta.dtype.is_floating_point
        and not transposed
    )


def _flat_values(tree: Any):
    if isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _flat_values(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _flat_values(item)
    else:
        yield tree
