"""Converters of the fused CPU attention ops that autograd records for sdpa.

The forward op stays whole (``torchkiln.aot.KEEP_WHOLE``: torch's decomposition
of it returns a logsumexp the fused backward misreads); both are re-derived here
from the attention scores, the backward from the recomputed probabilities.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from torchkiln.exc import NotImplementedYet
from torchkiln_onnxrt.converter import GraphBuilder, Value, converts, out_dtype
from torchkiln_onnxrt.sizes import concrete, is_symbolic, same_sizes

aten = torch.ops.aten


def _swap_last(b: GraphBuilder, name: str, ndim: int) -> str:
    return b.op("Transpose", [name], perm=[*range(ndim - 2), ndim - 1, ndim - 2])


def _scores(
    b: GraphBuilder,
    q: Value,
    k: Value,
    dtype: torch.dtype,
    dropout_p: float,
    is_causal: bool,
    attn_mask: Value | None,
    scale: float | None,
) -> tuple[str, str]:
    """The masked, scaled attention scores, and the scale as a constant."""
    if dropout_p:
        raise NotImplementedYet(
            "the onnxrt backend cannot replay the dropout mask of fused attention"
        )
    if not same_sizes(q.shape[:-2], k.shape[:-2]):
        concrete([*q.shape[:-2], *k.shape[:-2]], "attention heads")
        raise NotImplementedYet("the onnxrt backend's attention needs as many key as query heads")
    ndim = q.ndim
    if scale is None:
        scale = 1 / math.sqrt(concrete(q.shape[-1:], "attention's scale")[0])
    scale_c = b.const(scale, dtype)
    scores = b.op("Mul", [b.op("MatMul", [q.name, _swap_last(b, k.name, ndim)]), scale_c])
    if is_causal:
        scores = b.op(
            "Where", [_causal(b, q.shape[-2], k.shape[-2]), scores, b.const(-math.inf, dtype)]
        )
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = b.op("Where", [attn_mask.name, scores, b.const(-math.inf, dtype)])
        else:
            scores = b.op("Add", [scores, b.as_dtype(attn_mask, dtype)])
    return scores, scale_c


def _causal(b: GraphBuilder, queries, keys) -> str:
    """Which key each query sees: ``key <= query`` (the lower triangle, from the top left)."""
    if not is_symbolic(queries) and not is_symbolic(keys):
        return b.const(np.tril(np.ones((queries, keys), dtype=bool)), torch.bool)
    one = b.const(1, torch.int64)
    rows = b.op("Range", [b.const(0, torch.int64), b.as_dtype(queries, torch.int64), one])
    columns = b.op("Range", [b.const(0, torch.int64), b.as_dtype(keys, torch.int64), one])
    return b.op("LessOrEqual", [columns, b.reshape(rows, [-1, 1])])


@converts(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention(
    b: GraphBuilder,
    node,
    q: Value,
    k: Value,
    v: Value,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    attn_mask: Value | None = None,
    scale: float | None = None,
) -> list[str]:
    dtype = out_dtype(node)
    scores, _ = _scores(b, q, k, dtype, dropout_p, is_causal, attn_mask, scale)
    out = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v.name])
    logsumexp = b.op("ReduceLogSumExp", [scores, b.ints([-1])], keepdims=0)
    return [out, b.as_dtype(Value(logsumexp, dtype, q.shape[:-1]), out_dtype(node, 1))]


@converts(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def flash_attention_backward(
    b: GraphBuilder,
    node,
    grad: Value,
    q: Value,
    k: Value,
    v: Value,
    out: Value,
    logsumexp: Value,
    dropout_p: float,
    is_causal: bool,
    *,
    attn_mask: Value | None = None,
    scale: float | None = None,
) -> list[str]:
    dtype = out_dtype(node)
    ndim = q.ndim
    scores, scale_c = _scores(b, q, k, dtype, dropout_p, is_causal, attn_mask, scale)
    probs = b.op("Softmax", [scores], axis=-1)
    grad_v = b.op("MatMul", [_swap_last(b, probs, ndim), grad.name])
    grad_probs = b.op("MatMul", [grad.name, _swap_last(b, v.name, ndim)])
    row_dot = b.op("ReduceSum", [b.op("Mul", [grad_probs, probs]), b.ints([-1])], keepdims=1)
    grad_scores = b.op("Mul", [probs, b.op("Sub", [grad_probs, row_dot])])
    grad_q = b.op("Mul", [b.op("MatMul", [grad_scores, k.name]), scale_c])
    grad_k = b.op("Mul", [b.op("MatMul", [_swap_last(b, grad_scores, ndim), q.name]), scale_c])
    return [grad_q, grad_k, grad_v]
