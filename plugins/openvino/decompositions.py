"""The openvino backend's own decompositions, written for what OpenVINO's CPU plugin runs fast.

:func:`batch_norm_training`: torch's decomposition of the training batch norm computes
``(x - mean) * rstd * weight + bias`` on the whole tensor, ``rstd`` and the weight
broadcast from ``[1, C, 1, 1]``. OpenVINO runs those ops as one planar kernel, and
reorders every convolution output (NHWC inside OpenVINO) to NCHW for it with its slow
reference reorder: 0.5 ms each for convnet's 8x16x32x32 activations, a third of its
forward. Folded into a per-channel scale and shift (``x * scale + shift``, both computed
on ``[C]``), the norm is one per-channel multiply-add that OpenVINO runs in the
convolution's own layout: convnet's forward went from 12.4 to 8.7 ms.

:data:`WRITTEN_OUT`: the backward ops with a fused torch kernel, and the training batch norm
(whose backward is one), stay whole in the trace (:func:`table`);
:mod:`torchkiln_openvino.rewrites` writes them out for OpenVINO's frontend with
:func:`written_out`, the decompositions the trace would have applied. Torch, where it
runs a graph instead of OpenVINO (:mod:`torchkiln_openvino.choice`), runs its fused
kernels: decomposed, it ran convnet's backward graph in 27 ms where OpenVINO took 17;
whole, in 20 ms where OpenVINO took 29 (each convolution's whole backward, weights'
gradients included, on the first call's inputs). The batch norm's output is then no
longer recomputed in the backward from its input (the min cut recomputes no batch
norm): the forward saves the ReLU outputs as well.
On tensors of :data:`LARGE` elements or more, the backwards of softmax, layer norm and
GELU are left to the next backend (:mod:`torchkiln_openvino.ops`): decomposed, OpenVINO
runs each as a reduction and an elementwise pass or two, at half torch's speed on such
rows (a 4096x1024 softmax backward: 8.1 against 4.0 ms); below that, the partition
switch (an OpenVINO call more, ~0.5 ms a cut in hf_bert's backward) costs more than the
kernel saves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch._decomp import get_decompositions

from torchkiln.aot import core_aten_table, keep_whole

aten = torch.ops.aten

#: torch's own decomposition, for what :func:`batch_norm_training` leaves to it
_TORCH_BATCH_NORM = get_decompositions([aten._native_batch_norm_legit_functional])[
    aten._native_batch_norm_legit_functional.default
]

#: Elements from which a tensor's softmax, layer norm and GELU backward run in torch; so do
#: a training layer norm (:func:`torchkiln_openvino.rewrites.expands`), softmaxes and sums
#: (:data:`torchkiln_openvino.ops.TORCH_FASTER_WHEN_LARGE`)
LARGE = 1 << 20

#: The backward ops left to the next backend on large tensors (:mod:`torchkiln_openvino.ops`)
FUSED_BACKWARDS = (
    aten._softmax_backward_data.default,
    aten.native_layer_norm_backward.default,
    aten.gelu_backward.default,
)

#: The ops the trace keeps whole, written out for OpenVINO by :func:`written_out`
WRITTEN_OUT = frozenset(
    {
        *FUSED_BACKWARDS,
        aten._native_batch_norm_legit_functional.default,
        aten.native_batch_norm_backward.default,
        aten.threshold_backward.default,
        aten.silu_backward.default,
        aten.tanh_backward.default,
        aten.sigmoid_backward.default,
        aten._log_softmax_backward_data.default,
        aten.embedding_dense_backward.default,
    }
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


@functools.cache
def table() -> dict:
    """torch's core-aten table, minus :data:`WRITTEN_OUT` (and the ops of
    ``torchkiln.aot.KEEP_WHOLE``); one dict, read and never written (each op written out
    traces with it: building it takes ~4 ms)."""
    return keep_whole({op: fn for op, fn in core_aten_table().items() if op not in WRITTEN_OUT})


def written_out(op) -> Callable:
    """The decomposition of ``op`` (one of :data:`WRITTEN_OUT`) that OpenVINO converts:
    :func:`batch_norm_training` for the training batch norm, torch's for the others."""
    if op is aten._native_batch_norm_legit_functional.default:
        return batch_norm_training
    return get_decompositions([op])[op]
