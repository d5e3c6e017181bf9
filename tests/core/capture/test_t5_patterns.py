"""Spec: what Hugging Face T5's attention does runs in one graph, in plain torch code.

T5 buckets relative positions (``torch.log`` of a tensor over ``math.log`` of constants,
``full_like``, ``where``) and adds the learned bias as an attention mask whose masked
entries are ``torch.finfo(dtype).min``. Constructing that ``finfo`` broke the graph once
per attention layer (16 breaks in the tiny T5); a ``finfo`` or ``iinfo`` is an immutable
constant read from a dtype, so capture answers it now, guarded like the dtype it came from.
"""

import math

import pytest
import torch

import torchkiln
from kiln_testing import check_compiled


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


def relative_position_bucket(relative_position, bidirectional, num_buckets=8, max_distance=128):
    """T5's bucketing, as ``transformers`` writes it."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    return relative_buckets + torch.where(is_small, relative_position, relative_position_if_large)


class T5Attention(torch.nn.Module):
    """Self-attention with T5's learned relative-position bias, causal in the decoder."""

    def __init__(self, causal: bool, heads: int = 2, dim: int = 8):
        super().__init__()
        self.causal, self.heads = causal, heads
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.bias = torch.nn.Embedding(8, heads)

    def position_bias(self, length: int) -> torch.Tensor:
        context = torch.arange(length, dtype=torch.long)[:, None]
        memory = torch.arange(length, dtype=torch.long)[None, :]
        buckets = relative_position_bucket(memory - context, bidirectional=not self.causal)
        return self.bias(buckets).permute([2, 0, 1]).unsqueeze(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, -1).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        bias = self.position_bias(length)
        if self.causal:  # transformers' create_position_bias_mask
            min_dtype = torch.finfo(k.dtype).min
            causal = torch.arange(length)[:, None] >= torch.arange(length)[None, :]
            bias = torch.where(causal.view(1, 1, length, length), bias, min_dtype)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return out.transpose(1, 2).reshape(batch, length, dim)


def encoder_decoder() -> torch.nn.Module:
    """Bidirectional buckets (the encoder's), then causal ones and the ``finfo`` mask."""
    return torch.nn.Sequential(T5Attention(causal=False), T5Attention(causal=True))


def test_t5_attention_one_graph(backend):
    def make():
        return (torch.randn(2, 6, 8, requires_grad=True),)

    model = encoder_decoder()
    check_compiled(model, make, backend=backend, graphs=1, grads=True, fullgraph=True)


@pytest.mark.parametrize("train", [False, True])
def test_t5_attention_another_length_recompiles_once(train):
    """A second sequence length captures once more (dynamic); a third captures nothing."""
    model = encoder_decoder().train(train)
    compiled = torchkiln.compile(model, backend="eager", fullgraph=True)
    for call, length in enumerate((6, 4, 9)):
        x = torch.randn(2, length, 8, requires_grad=train)
        eager_x = x.detach().clone().requires_grad_(train)
        with torch.set_grad_enabled(train):
            actual, expected = compiled(x), model(eager_x)
        torch.testing.assert_close(actual, expected)
        if train:
            grads = torch.autograd.grad(actual.square().sum(), [x, *model.parameters()])
            eager = torch.autograd.grad(expected.square().sum(), [eager_x, *model.parameters()])
            torch.testing.assert_close(grads, eager)
        assert frames() == min(call + 1, 2), f"length {length}: {frames()} frames captured"


def masked_fill_with_limits(x, idx):
    low = torch.finfo(x.dtype).min
    info = torch.iinfo(idx.dtype)
    return (
        x.masked_fill(x < 0, low),
        idx.clamp(info.min + 1, info.max - 1),
        torch.finfo(x.dtype).eps,
    )


def test_finfo_iinfo_of_a_dtype(backend):
    def make():
        return torch.randn(3, 4), torch.randint(-5, 5, (3,))

    check_compiled(masked_fill_with_limits, make, backend=backend, graphs=1, fullgraph=True)


def test_finfo_follows_the_dtype():
    """Another dtype is another ``finfo``: the dtype's guard makes it capture again."""
    compiled = torchkiln.compile(masked_fill_with_limits, backend="eager", fullgraph=True)
    idx = torch.tensor([1, 2])
    for dtype, index_dtype in ((torch.float32, torch.int64), (torch.float16, torch.int8)):
        x = torch.randn(4, dtype=dtype)
        actual = compiled(x, idx.to(index_dtype))
        torch.testing.assert_close(actual, masked_fill_with_limits(x, idx.to(index_dtype)))
    assert frames() == 2


def default_limits(x):
    return x.clamp(min=torch.finfo().min / 2)


def test_finfo_of_the_default_dtype():
    """``torch.finfo()`` reads the default dtype, which the entry's guards check."""
    compiled = torchkiln.compile(default_limits, backend="eager", fullgraph=True)
    x = torch.full((3,), -math.inf, dtype=torch.float64)
    torch.testing.assert_close(compiled(x), default_limits(x))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.testing.assert_close(compiled(x), default_limits(x))
    finally:
        torch.set_default_dtype(previous)
    assert frames() == 2


LIMITS = torch.finfo(torch.float16)


def clamp_to_global_limits(x):
    return x.clamp(LIMITS.min, LIMITS.max)


def test_finfo_global_rebound():
    """A ``finfo`` read from a global is guarded by value: rebinding it captures again."""
    global LIMITS
    compiled = torchkiln.compile(clamp_to_global_limits, backend="eager", fullgraph=True)
    x = torch.tensor([-1e6, 0.5, 1e6])
    torch.testing.assert_close(compiled(x), clamp_to_global_limits(x))
    LIMITS = torch.finfo(torch.bfloat16)
    try:
        torch.testing.assert_close(compiled(x), clamp_to_global_limits(x))
    finally:
        LIMITS = torch.finfo(torch.float16)
    assert frames() == 2
