"""The openvino backend's own decompositions, written for what OpenVINO's CPU plugin runs fast.

:func:`batch_norm_training`: torch's decomposition of the training batch norm computes
``(x - mean) * rstd * weight + bias`` on the whole tensor, ``rstd`` and the weight
broadcast from ``[1, C, 1, 1]``. OpenVINO runs those ops as one planar kernel, and
reorders every convolution output (NHWC inside OpenVINO) to NCHW for it with its slow
reference reorder: 0.5 ms each for convnet's 8x16x32x32 activations, a third of its
forward. Folded into a per-channel scale and shift (``x * scale + shift``, both computed
on ``[C]``), the norm is one per-channel multiply-add that OpenVINO runs in the
convolution's own layout: convnet's forward went from 12.4 to 8.7 ms.

:func:`convolution_backward`: a convolution's backward split in two, its weight gradient
apart, which the capabilities leave to the next backend
(:func:`torchkiln_openvino.ops.is_weight_gradient`). OpenVINO computes it as a
convolution of the input by the output's gradient, batch and channels swapped
(:func:`torchkiln_openvino.rewrites.convolution_backward`), 1.3-2.5x slower than torch's
own at one thread on convnet's shapes (8x16x32x32 by 16x16x3x3: 1.01 against 0.41 ms);
its input gradient runs 0.6-1.1x torch's time, and stays in OpenVINO.

:func:`fused_when_large`: the backwards of softmax, layer norm and GELU stay whole (one
torch kernel each, left to the next backend) on tensors of :data:`LARGE` elements or
more. Decomposed, OpenVINO runs each as a reduction and an elementwise pass or two, at
half torch's speed on such rows (a 4096x1024 softmax backward: 8.1 against 4.0 ms);
below that, the partition switch (an OpenVINO call more, ~0.5 ms a cut in hf_bert's
backward) costs more than the kernel saves.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

#: torch's own decomposition, for what :func:`batch_norm_training` leaves to it
_TORCH_BATCH_NORM = get_decompositions([aten._native_batch_norm_legit_functional])[
    aten._native_batch_norm_legit_functional.default
]

#: Elements from which a tensor's softmax, layer norm and GELU backward run in torch; so do
#: a training layer norm (:func:`torchkiln_openvino.rewrites.expands`), softmaxes and sums
#: (:data:`torchkiln_openvino.ops.TORCH_FASTER_WHEN_LARGE`)
LARGE = 1 << 20

#: The backward ops :func:`fused_when_large` keeps whole on large tensors
FUSED_BACKWARDS = (
    aten._softmax_backward_data.default,
    aten.native_layer_norm_backward.default,
    aten.gelu_backward.default,
)


def batch_norm_training(
    input: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[torch.Tensor, ...]:
    """``_native_batch_norm_legit_functional`` as a per-channel scale and shift (float32 and
    float64 training norms; torch's decomposition otherwise: it computes the statistics of
    lower precisions in float32).

    The output is ``x * (rstd * weight) + (bias - mean * rstd * weight)``: it differs from
    torch's ``(x - mean) * rstd * weight + bias`` by rounding only (relative to the mean's
    magnitude, not the deviation's: ~1e-7 of ``mean / std`` in float32).
    """
    if not training or input.dtype not in (torch.float32, torch.float64):
        return _TORCH_BATCH_NORM(
            input, weight, bias, running_mean, running_var, training, momentum, eps
        )
    dims = [0, *range(2, input.dim())]
    var, mean = torch.var_mean(input, dim=dims, correction=0, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    save_mean, save_rstd = torch.squeeze(mean, dims), torch.squeeze(rstd, dims)
    scale = save_rstd if weight is None else save_rstd * weight
    shift = -save_mean * scale if bias is None else bias - save_mean * scale
    per_channel = [1, -1] + [1] * (input.dim() - 2)
    output = input * scale.reshape(per_channel) + shift.reshape(per_channel)
    n = input.numel() / input.shape[1]
    unbiased_var = torch.squeeze(var, dims) * (n / (n - 1))
    new_running_mean = momentum * save_mean + (1 - momentum) * running_mean
    new_running_var = momentum * unbiased_var + (1 - momentum) * running_var
    return output, save_mean, save_rstd, new_running_mean, new_running_var


def convolution_backward(
    grad: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: list[int] | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
) -> tuple[torch.Tensor | None, ...]:
    """``convolution_backward`` as two: the weight's gradient alone (``output_mask``
    ``[False, True, False]``), and the input's and bias's; left whole (``NotImplemented``)
    when it computes the weight's gradient alone or not at all, or the convolution is
    grouped or transposed (the whole backward runs in the next backend then)."""
    want_input, want_weight, want_bias = output_mask
    if not want_weight or not (want_input or want_bias) or transposed or groups != 1:
        return NotImplemented
    options = (bias_sizes, stride, padding, dilation, transposed, output_padding, groups)
    backward = aten.convolution_backward.default
    grad_input, _, grad_bias = backward(
        grad, input, weight, *options, [want_input, False, want_bias]
    )
    _, grad_weight, _ = backward(grad, input, weight, *options, [False, True, False])
    return grad_input, grad_weight, grad_bias


def fused_when_large(decomposition):
    """``decomposition`` of a backward op whose first argument is the gradient, on tensors
    under :data:`LARGE` elements; ``NotImplemented`` (the op kept whole) from there on."""

    def decompose(grad, *args, **kwargs):
        if grad.numel() >= LARGE:
            return NotImplemented
        return decomposition(grad, *args, **kwargs)

    return decompose


def table() -> dict:
    """The decompositions above, by the overload each replaces."""
    torch_own = get_decompositions(list(FUSED_BACKWARDS))
    return {
        aten._native_batch_norm_legit_functional.default: batch_norm_training,
        aten.convolution_backward.default: convolution_backward,
        **{op: fused_when_large(torch_own[op]) for op in FUSED_BACKWARDS},
    }
