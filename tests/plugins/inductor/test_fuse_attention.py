"""Explicit attention becomes one scaled_dot_product_attention call, with eager's results.

Most tests run the rewritten torch-level graph eagerly (the rewrite's semantics, no compiler
run); a few compile through the inductor, C++ and Triton, forward and backward.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchkiln
from torchkiln_inductor.backend import compile_graph
from torchkiln_inductor.fuse_attention import fuse_attention

B, H, T, D = 2, 3, 8, 16


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention (benchmarks/models/nanogpt.py)."""

    def __init__(self, embd=H * D, block=T):
        super().__init__()
        self.qkv = nn.Linear(embd, 3 * embd)
        mask = torch.tril(torch.ones(block, block, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (y.view(b, t, H, c // H).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(b, t, c)


def qkv(*shape, dtype=torch.float32):
    return [torch.randn(*(shape or (B, H, T, D)), dtype=dtype, requires_grad=True) for _ in "qkv"]


def causal(t=T):
    return torch.ones(t, t, dtype=torch.bool).tril()


def sdpa_count(gm):
    return sum(n.target is F.scaled_dot_product_attention for n in gm.graph.nodes)


def fused(fn, *args):
    """``fn`` traced and rewritten by the pass; asserts the graph holds one SDPA call."""
    gm = fuse_attention(torch.fx.symbolic_trace(fn), list(args), cuda_tf32=False)
    assert sdpa_count(gm) == 1, gm.code
    return gm


def check(actual, expected, *inputs, rtol=None, atol=None):
    """Outputs and the gradients of the inputs that require them match."""
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    leaves = [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    if leaves:
        grad = torch.randn_like(expected)
        got = torch.autograd.grad(actual, leaves, grad)
        for a, e in zip(got, torch.autograd.grad(expected, leaves, grad)):
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol)


def div_scale_and_bool_mask(q, k, v, m):
    att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D)
    return torch.softmax(att.masked_fill(~m, float("-inf")), dim=-1) @ v


def additive_mask(q, k, v, bias):
    return torch.softmax(q @ k.transpose(2, 3) * 0.3 + bias, dim=3) @ v


def no_scale_no_mask(q, k, v):
    return torch.matmul(torch.matmul(q, k.transpose(-1, -2)).softmax(-1), v)


def where_mask(q, k, v, m):
    att = torch.where(m, 0.5 * (q @ k.mT), float("-inf"))
    return att.softmax(-1) @ v


def where_true_masks(q, k, v, m):
    att = torch.where(m, float("-inf"), q @ k.transpose(-2, -1) / 4)
    return att.softmax(-1) @ v


def bmm_3d(q, k, v):
    return torch.bmm(F.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.25, dim=-1), v)


def inactive_dropout(q, k, v):
    att = F.softmax(q @ k.transpose(-2, -1) * 0.25, dim=-1)
    att = F.dropout(att, 0.1, training=False)
    return F.dropout(att, 0.0, training=True) @ v


@pytest.mark.parametrize(
    ("fn", "extra"),
    [
        (div_scale_and_bool_mask, lambda: [causal()]),
        (additive_mask, lambda: [torch.randn(B, 1, T, T, requires_grad=True)]),
        (no_scale_no_mask, list),
        (where_mask, lambda: [causal()]),
        (where_true_masks, lambda: [~causal()]),
        (inactive_dropout, list),
    ],
)
def test_variants_become_one_sdpa_with_eager_results_and_gradients(fn, extra):
    args = [*qkv(), *extra()]
    check(fused(fn, *args)(*args), fn(*args), *args)


def test_3d_bmm_attention_runs_as_a_batch_of_one():
    args = qkv(B * H, T, D)
    check(fused(bmm_3d, *args)(*args), bmm_3d(*args), *args)


def test_other_query_and_key_lengths_and_value_width():
    q, k, v = torch.randn(B, H, 5, D), torch.randn(B, H, T, D), torch.randn(B, H, T, 24)
    check(fused(no_scale_no_mask, q, k, v)(q, k, v), no_scale_no_mask(q, k, v))


@pytest.mark.parametrize("mask_shape", [(T, T), (B, 1, 1, T), (B, H, T, T)])
def test_masks_broadcast_as_in_eager(mask_shape):
    args = [*qkv(), torch.rand(mask_shape) > 0.3]
    args[-1][..., 0] = True  # no row masks every key here
    check(fused(div_scale_and_bool_mask, *args)(*args), div_scale_and_bool_mask(*args), *args)


def test_rows_that_mask_every_key_are_nan_as_in_eager():
    """SDPA alone gives 0 there; the rewrite puts eager's NaN back."""
    q, k, v = qkv()
    m = causal()
    m[3] = False
    with torch.no_grad():
        out = fused(div_scale_and_bool_mask, q, k, v, m)(q, k, v, m)
        expected = div_scale_and_bool_mask(q, k, v, m)
    assert out[:, :, 3].isnan().all() and not out[:, :, :3].isnan().any()
    torch.testing.assert_close(out, expected, equal_nan=True)


def test_additive_rows_of_minus_inf_are_nan_as_in_eager():
    q, k, v = qkv()
    bias = torch.zeros(1, 1, T, T)
    bias[..., 2, :] = float("-inf")
    with torch.no_grad():
        out = fused(additive_mask, q, k, v, bias)(q, k, v, bias)
        torch.testing.assert_close(out, additive_mask(q, k, v, bias), equal_nan=True)


def test_half_precision_softmax_in_float32_cast_back():
    def fn(q, k, v):
        att = (q @ k.transpose(-2, -1) * 0.25).float()
        return F.softmax(att, dim=-1).to(q.dtype) @ v

    args = qkv(dtype=torch.bfloat16)
    check(fused(fn, *args)(*args), fn(*args), *args, rtol=2e-2, atol=2e-2)


def kept(fn, *args):
    """``fn`` is left alone by the pass."""
    gm = torch.fx.symbolic_trace(fn)
    assert fuse_attention(gm, list(args), cuda_tf32=False) is gm


def test_weights_used_elsewhere_keep_the_graph():
    def fn(q, k, v):
        att = F.softmax(q @ k.transpose(-2, -1), dim=-1)
        return att @ v, att

    kept(fn, *qkv())


def test_scores_used_elsewhere_keep_the_graph():
    def fn(q, k, v):
        scores = q @ k.transpose(-2, -1)
        return F.softmax(scores * 0.25, dim=-1) @ v + scores.sum()

    kept(fn, *qkv())


def test_active_dropout_keeps_the_graph():
    def fn(q, k, v):
        return F.dropout(F.softmax(q @ k.transpose(-2, -1), dim=-1), 0.1, training=True) @ v

    kept(fn, *qkv())


def test_softmax_over_another_dimension_keeps_the_graph():
    kept(lambda q, k, v: F.softmax(q @ k.transpose(-2, -1), dim=-2) @ v, *qkv())


@pytest.mark.parametrize(
    "fn",
    [
        lambda q, k, v, m: (q @ k.transpose(-2, -1)).masked_fill(m, -1e9).softmax(-1) @ v,
        lambda q, k, v, m: (q @ k.transpose(-2, -1)).softmax(-1).half().float() @ v,
        lambda q, k, v, m: (q @ k.transpose(-2, -1)).mul(-1.0).softmax(-1) @ v,
        lambda q, k, v, m: ((q @ k.transpose(-2, -1)) + m.float()).mul(2.0).softmax(-1) @ v,
    ],
    ids=["finite_fill", "half_cast", "negative_scale", "scale_after_bias"],
)
def test_forms_sdpa_computes_differently_keep_the_graph(fn):
    kept(fn, *qkv(), causal())


def test_broadcast_batch_dimensions_keep_the_graph():
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, 1, T, D), torch.randn(B, 1, T, D)
    kept(no_scale_no_mask, q, k, v)


def test_a_write_between_the_matmuls_keeps_the_graph():
    def fn(q, k, v):
        att = q @ k.transpose(-2, -1)
        q.mul_(2)  # SDPA placed at the last matmul would read the new q
        return F.softmax(att, dim=-1) @ v

    kept(fn, *(torch.randn(B, H, T, D) for _ in "qkv"))


def through_capture(fn, *args):
    """``fn`` captured by torchkiln (graphs with capture's example values), each graph
    rewritten by the pass and run eagerly; returns the compiled function and the graphs."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(fuse_attention(gm, example_inputs, cuda_tf32=False))
        return graphs[-1].forward

    return torchkiln.compile(fn, backend=backend), graphs


def test_captured_nanogpt_attention_one_rewrite_per_layer():
    torch.manual_seed(0)
    module, x = (
        nn.Sequential(CausalSelfAttention(), CausalSelfAttention()),
        torch.randn(B, T, H * D),
    )
    compiled, graphs = through_capture(module, x)
    check(compiled(x), module(x), *module.parameters())
    assert [sdpa_count(gm) for gm in graphs] == [2]


def test_captured_eval_dropout_and_no_op_casts_are_looked_through():
    """Capture leaves them behind as dead nodes, reading the weights."""

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.1)

        def forward(self, q, k, v, m):
            att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            att = torch.where(m, att, float("-inf")).float().softmax(dim=-1).type_as(q)
            return self.drop(att) @ v

    module, args = Attention().eval(), [*qkv(), causal()]
    compiled, graphs = through_capture(module, *args)
    check(compiled(*args), module(*args), *args)
    assert [sdpa_count(gm) for gm in graphs] == [1]


@pytest.fixture
def fresh_plans(tmp_path, monkeypatch):
    """A cache folder of its own: a plan loaded from the plan cache skips the pass."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    torchkiln.counters.clear()


@pytest.mark.usefixtures("fresh_plans")
def test_inductor_nanogpt_attention_forward_and_gradients():
    torch.manual_seed(0)
    module, x = CausalSelfAttention(), torch.randn(B, T, H * D, requires_grad=True)
    compiled = torchkiln.compile(module, backend="inductor")
    check(compiled(x), module(x), x, *module.parameters(), rtol=1e-4, atol=1e-4)
    assert torchkiln.counters["inductor"]["fuse_attention"] == 1


@pytest.mark.usefixtures("fresh_plans")
def test_inductor_triton_path_forward_and_gradients():
    """A graph without capture's example values: the pass runs it on fake tensors."""
    torch.manual_seed(0)
    args = [*qkv(1, 2, 8, 16), causal()]
    compiled = compile_graph(
        torch.fx.symbolic_trace(div_scale_and_bool_mask), args, cpu_backend="triton"
    )
    check(compiled(*args), div_scale_and_bool_mask(*args), *args, rtol=1e-4, atol=1e-4)
    assert torchkiln.counters["inductor"]["fuse_attention"] == 1


@pytest.mark.usefixtures("fresh_plans")
def test_option_off_keeps_explicit_attention():
    torch.manual_seed(0)
    args = [*qkv(1, 2, 8, 16), causal()]
    compiled = compile_graph(
        torch.fx.symbolic_trace(div_scale_and_bool_mask), args, fuse_attention=False
    )
    check(compiled(*args), div_scale_and_bool_mask(*args), *args, rtol=1e-4, atol=1e-4)
    assert torchkiln.counters["inductor"]["fuse_attention"] == 0


def test_kept_attention_says_why(caplog):
    from torchkiln import logs

    logs.set_logs("output_code")
    try:
        with caplog.at_level("INFO", logger="torchkiln"):
            kept(lambda q, k, v: F.softmax(q @ k.transpose(-2, -1), dim=-2) @ v, *qkv())
    finally:
        logs.set_logs()
    assert "kept explicit: softmax is not over the last dimension" in caplog.text
