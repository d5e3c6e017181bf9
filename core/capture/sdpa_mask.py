"""Attention masks handed to ``scaled_dot_product_attention`` dense in their last dimension.

Libraries that detect compilation (``torch.compiler.is_compiling()``) build a mask they
would skip in eager code: Hugging Face ``transformers`` 5.17 cannot check that a padding
mask is all ones while tracing, so it passes an expanded boolean mask whose last dimension
has stride 0. CUDA's fused attention kernels need a mask dense in that dimension; given
this one, SDPA falls back to its math path in float32 (BERT-base shapes on an H100: 1350
µs a call, against 120 µs with the same mask made contiguous). The capture adds that
``contiguous()`` before each such call (a copy of a few µs; one per call, so that a mask
changed in place between two calls is copied again), which changes no value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from torchkiln.capture import variables as V

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: positional index of ``attn_mask`` in ``scaled_dot_product_attention(q, k, v, attn_mask)``
_MASK_POSITION = 3


def is_sdpa(fn) -> bool:
    return fn is F.scaled_dot_product_attention


def with_dense_mask(tx: Translator, args: list, kwargs: dict) -> tuple[list, dict]:
    """``args``/``kwargs`` of an SDPA call, with a mask strided in its last dimension made
    contiguous."""
    if "attn_mask" in kwargs:
        kwargs = {**kwargs, "attn_mask": _dense(tx, kwargs["attn_mask"])}
    elif len(args) > _MASK_POSITION:
        args = [
            *args[:_MASK_POSITION],
            _dense(tx, args[_MASK_POSITION]),
            *args[_MASK_POSITION + 1 :],
        ]
    return args, kwargs


def _dense(tx: Translator, mask):
    if not isinstance(mask, V.TensorVariable) or not _strided_last_dim(mask.example):
        return mask
    return tx.output.call_op("call_method", "contiguous", [mask], {})


def _strided_last_dim(t: torch.Tensor) -> bool:
    return t.dim() > 0 and t.size(-1) > 1 and t.stride(-1) != 1
