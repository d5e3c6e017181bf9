"""Converters of convolution and pooling ops, with their backward ops.

Random ops have no converter: torch draws their numbers (the core partitions them
to the next backend), so that ``torch.manual_seed`` gives eager's numbers; ONNX's
random ops draw from onnxruntime's own generator, which no torch seed reaches.

Normalizations (batch, layer, group norm) never reach here: the backend's
decomposition table turns them into pointwise ops and reductions.
"""

from __future__ import annotations

import math

import torch

from torchkiln.exc import NotImplementedYet
from torchkiln_onnxrt.converter import GraphBuilder, Value, converts, out_dtype, out_shape
from torchkiln_onnxrt.sizes import concrete

aten = torch.ops.aten


def _per_dim(value, spatial: int) -> list[int]:
    values = [value] if isinstance(value, int) else list(value)
    return values * spatial if len(values) == 1 else values


@converts(aten.convolution.default)
def convolution(
    b: GraphBuilder,
    node,
    x: Value,
    weight: Value,
    bias,
    stride,
    padding,
    dilation,
    transposed: bool,
    output_padding,
    groups: int,
) -> str:
    spatial = weight.ndim - 2
    pads = _per_dim(padding, spatial)
    inputs = [x.name, weight.name] + ([bias.name] if bias is not None else [])
    attrs = dict(
        strides=_per_dim(stride, spatial),
        dilations=_per_dim(dilation, spatial),
        pads=pads + pads,
        group=groups,
    )
    if transposed:
        return b.op(
            "ConvTranspose", inputs, output_padding=_per_dim(output_padding, spatial), **attrs
        )
    return b.op("Conv", inputs, **attrs)


@converts(aten.convolution_backward.default)
def convolution_backward(
    b: GraphBuilder,
    node,
    grad: Value,
    x: Value,
    weight: Value,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed: bool,
    output_padding,
    groups: int,
    output_mask,
) -> list[str | None]:
    spatial = weight.ndim - 2
    stride, dilation = _per_dim(stride, spatial), _per_dim(dilation, spatial)
    pads = _per_dim(padding, spatial)
    attrs = dict(strides=stride, dilations=dilation, pads=pads + pads, group=groups)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if transposed:
            grad_input = b.op("Conv", [grad.name, weight.name], **attrs)
        else:
            grad_input = _conv_input_grad(b, grad, x, weight, stride, pads, dilation, attrs)
    if output_mask[1]:
        # A transposed conv is the input gradient of a conv: swap the roles.
        big, small = (grad, x) if transposed else (x, grad)
        grad_weight = _conv_weight_grad(b, small, big, weight, stride, pads, dilation, groups)
    if output_mask[2]:
        grad_bias = b.op("ReduceSum", [grad.name, b.ints([0, *range(2, grad.ndim)])], keepdims=0)
    return [grad_input, grad_weight, grad_bias]


def _conv_input_grad(b, grad: Value, x: Value, weight: Value, stride, pads, dilation, attrs) -> str:
    """dX as a transposed conv; output_padding adds back the rows the stride skipped."""
    kernel = concrete(weight.shape[2:], "a convolution's kernel")
    concrete([*x.shape[2:], *grad.shape[2:]], "a convolution's input gradient")
    extra = [
        x.shape[2 + i]
        - ((grad.shape[2 + i] - 1) * stride[i] - 2 * pads[i] + dilation[i] * (kernel[i] - 1) + 1)
        for i in range(len(kernel))
    ]
    return b.op("ConvTranspose", [grad.name, weight.name], output_padding=extra, **attrs)


def _conv_weight_grad(
    b, grad: Value, x: Value, weight: Value, stride, pads, dilation, groups
) -> str:
    """dW as a convolution of the input by the output gradient.

    The batch becomes the reduced channel axis: input ``[N, G*C, *S]`` is laid
    out as ``[C, G*N, *S]``, the gradient ``[N, G*O, *So]`` as ``[G*O, N, *So]``,
    and a grouped conv with stride and dilation swapped yields ``[C, G*O, *K']``,
    cropped to the kernel size ``K`` and transposed to ``[G*O, C, *K]``.
    """
    n, channels, *space = x.shape
    per_group = channels // groups
    spatial = len(space)
    inp = b.reshape(x.name, [n, groups, per_group, *space])
    inp = b.op("Transpose", [inp], perm=[2, 1, 0, *range(3, 3 + spatial)])
    inp = b.reshape(inp, [per_group, groups * n, *space])
    kernel_like = b.op("Transpose", [grad.name], perm=[1, 0, *range(2, 2 + spatial)])
    full = b.op(
        "Conv",
        [inp, kernel_like],
        strides=dilation,
        dilations=stride,
        pads=pads + pads,
        group=groups,
    )
    kernel = list(weight.shape[2:])
    cropped = b.op(
        "Slice", [full, b.ints([0] * spatial), b.ints(kernel), b.ints(range(2, 2 + spatial))]
    )
    return b.op("Transpose", [cropped], perm=[1, 0, *range(2, 2 + spatial)])


def _batched(b: GraphBuilder, x: Value, spatial: int) -> str:
    """ONNX pools need a batch axis; add one to unbatched ``[C, *S]`` inputs."""
    if x.ndim == spatial + 1:
        return b.reshape(x.name, (1, *x.shape))
    return x.name


@converts(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def max_pool_with_indices(
    b: GraphBuilder, node, x: Value, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False
) -> list[str]:
    spatial = 2 if node.target is aten.max_pool2d_with_indices.default else 3
    pads = _per_dim(padding, spatial)
    data = _batched(b, x, spatial)
    values, flat_indices = b.op(
        "MaxPool",
        [data],
        outputs=2,
        kernel_shape=_per_dim(kernel_size, spatial),
        strides=_per_dim(stride or kernel_size, spatial),
        pads=pads + pads,
        dilations=_per_dim(dilation, spatial),
        ceil_mode=int(ceil_mode),
    )
    # ONNX indexes the whole tensor; torch indexes each (n, c) plane.
    plane = math.prod(x.shape[-spatial:])
    indices = b.op("Mod", [flat_indices, b.const(plane, torch.int64)], fmod=0)
    shape = out_shape(node, 0)
    return [b.reshape(values, shape), b.reshape(indices, shape)]


@converts(
    aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default
)
def max_pool_with_indices_backward(b: GraphBuilder, node, grad: Value, x: Value, *args) -> str:
    indices: Value = args[-1]
    spatial = 2 if node.target is aten.max_pool2d_with_indices_backward.default else 3
    lead = list(x.shape[:-spatial])
    plane = math.prod(x.shape[-spatial:])
    dtype = out_dtype(node)
    zeros = b.op("Expand", [b.const(0, dtype), b.ints([*lead, plane])])
    flat_grad = b.reshape(b.as_dtype(grad, dtype), [*lead, -1])
    flat_indices = b.reshape(indices.name, [*lead, -1])
    scattered = b.op(
        "ScatterElements", [zeros, flat_indices, flat_grad], axis=len(lead), reduction="add"
    )
    return b.reshape(scattered, x.shape)


@converts(aten.avg_pool2d.default, aten.avg_pool3d.default)
def avg_pool(
    b: GraphBuilder,
    node,
    x: Value,
    kernel_size,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
) -> str:
    if divisor_override is not None:
        raise NotImplementedYet(
            "the onnxrt backend's avg_pool converter does not handle divisor_override"
        )
    spatial = 2 if node.target is aten.avg_pool2d.default else 3
    pads = _per_dim(padding, spatial)
    data = _batched(b, x, spatial)
    pooled = b.op(
        "AveragePool",
        [data],
        kernel_shape=_per_dim(kernel_size, spatial),
        strides=_per_dim(stride or kernel_size, spatial),
        pads=pads + pads,
        ceil_mode=int(ceil_mode),
        count_include_pad=int(count_include_pad),
    )
    return b.reshape(pooled, out_shape(node))


@converts(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def avg_pool_backward(
    b: GraphBuilder,
    node,
    grad: Value,
    x: Value,
    kernel_size,
    stride,
    padding,
    ceil_mode,
    count_include_pad,
    divisor_override,
) -> str:
    """Each output's gradient divided by its window's divisor, spread back over the window.

    The divisors depend on shapes only, so torch computes them at compile time;
    a depthwise transposed conv with a ones kernel does the spreading.
    """
    spatial = 2 if node.target is aten.avg_pool2d_backward.default else 3
    kernel = _per_dim(kernel_size, spatial)
    strides = _per_dim(stride or kernel_size, spatial)
    pads = _per_dim(padding, spatial)
    space = list(concrete(x.shape[-spatial:], "avg_pool's backward divisors"))
    out_space = list(concrete(grad.shape[-spatial:], "avg_pool's backward divisors"))
    dtype = out_dtype(node)
    pool = {2: torch.nn.functional.avg_pool2d, 3: torch.nn.functional.avg_pool3d}[spatial]
    ones = torch.ones([1, 1, *space], dtype=torch.float64)
    args = (kernel, strides, pads, ceil_mode, count_include_pad)
    divisor = pool(ones, *args, divisor_override=1) / pool(ones, *args)
    if divisor_override is not None:
        divisor = torch.full_like(divisor, divisor_override)
    planes = b.reshape(b.as_dtype(grad, dtype), [-1, 1, *out_space])
    scaled = b.op("Div", [planes, b.const(divisor.numpy(), dtype)])
    natural = [(o - 1) * s - 2 * p + k for o, s, p, k in zip(out_space, strides, pads, kernel)]
    spread = b.op(
        "ConvTranspose",
        [scaled, b.const(torch.ones([1, 1, *kernel]).numpy(), dtype)],
        strides=strides,
        pads=pads + pads,
        output_padding=[max(0, want - got) for want, got in zip(space, natural)],
    )
    if any(got > want for want, got in zip(space, natural)):
        axes = range(2, 2 + spatial)
        spread = b.op("Slice", [spread, b.ints([0] * spatial), b.ints(space), b.ints(axes)])
    return b.reshape(spread, x.shape)


def _adaptive_factors(op: str, in_space, out_space) -> list[int]:
    in_space, out_space = concrete(in_space, op), concrete(out_space, op)
    if any(o == 0 or i % o for i, o in zip(in_space, out_space)):
        raise NotImplementedYet(
            f"the onnxrt backend's {op} converter handles output sizes that divide the input "
            f"size only (got {tuple(in_space)} -> {tuple(out_space)})"
        )
    return [i // o for i, o in zip(in_space, out_space)]


@converts(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool(b: GraphBuilder, node, x: Value, output_size) -> str:
    spatial = len(output_size)
    factors = _adaptive_factors("adaptive_avg_pool", x.shape[-spatial:], out_shape(node)[-spatial:])
    data = _batched(b, x, spatial)
    pooled = b.op("AveragePool", [data], kernel_shape=factors, strides=factors)
    return b.reshape(pooled, out_shape(node))


@converts(aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool_backward(b: GraphBuilder, node, grad: Value, x: Value) -> str:
    spatial = 2 if node.target is aten._adaptive_avg_pool2d_backward.default else 3
    lead = list(x.shape[:-spatial])
    factors = _adaptive_factors(
        "adaptive_avg_pool backward", x.shape[-spatial:], grad.shape[-spatial:]
    )
    dtype = out_dtype(node)
    interleaved = [d for o, f in zip(grad.shape[-spatial:], factors) for d in (o, 1)]
    spread = [d for o, f in zip(grad.shape[-spatial:], factors) for d in (o, f)]
    data = b.reshape(b.as_dtype(grad, dtype), lead + interleaved)
    data = b.op("Expand", [data, b.ints(lead + spread)])
    data = b.op("Div", [data, b.const(math.prod(factors), dtype)])
    return b.reshape(data, x.shape)


@converts(aten.upsample_nearest2d_backward.default, aten.upsample_nearest3d_backward.default)
def upsample_nearest_backward(
    b: GraphBuilder, node, grad: Value, output_size, input_size, *scales
) -> str:
    """Each input element's gradient is the sum over the block it was copied to."""
    spatial = len(output_size)
    lead = list(input_size[:-spatial])
    factors = _adaptive_factors("upsample_nearest backward", output_size, input_size[-spatial:])
    blocks = [d for i, f in zip(input_size[-spatial:], factors) for d in (i, f)]
    data = b.reshape(b.as_dtype(grad, out_dtype(node)), lead + blocks)
    axes = [len(lead) + 2 * i + 1 for i in range(spatial)]
    summed = b.op("ReduceSum", [data, b.ints(axes)], keepdims=0)
    return b.reshape(summed, list(input_size))


@converts(aten.native_group_norm.default)
def native_group_norm(
    b: GraphBuilder,
    node,
    x: Value,
    weight,
    bias,
    n: int,
    channels: int,
    hw: int,
    groups: int,
    eps: float,
) -> list[str]:
    """(normalized, mean, rstd) as aten returns them; mean and rstd are ``[N, groups]``."""
    dtype = out_dtype(node)
    grouped = b.reshape(b.as_dtype(x, dtype), [n, groups, -1])
    axes = b.ints([2])
    mean = b.op("ReduceMean", [grouped, axes], keepdims=1)
    centered = b.op("Sub", [grouped, mean])
    variance = b.op("ReduceMean", [b.op("Mul", [centered, centered]), axes], keepdims=1)
    rstd = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [variance, b.const(eps, dtype)])])])
    result = b.reshape(b.op("Mul", [centered, rstd]), x.shape)
    per_channel = [1, channels] + [1] * (x.ndim - 2)
    if weight is not None:
        result = b.op("Mul", [result, b.reshape(b.as_dtype(weight, dtype), per_channel)])
    if bias is not None:
        result = b.op("Add", [result, b.reshape(b.as_dtype(bias, dtype), per_channel)])
    return [result, b.reshape(mean, [n, groups]), b.reshape(rstd, [n, groups])]
