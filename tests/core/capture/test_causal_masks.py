"""A causal mask computed from sizes alone reaches backends as ``is_causal=True``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchkiln


def arange_mask(q, k, v):
    """As Hugging Face builds it under compilation: compares of aranges, expanded."""
    L, S = q.shape[-2], k.shape[-2]
    mask = (torch.arange(S)[None, :] <= torch.arange(L)[:, None])[None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(q.shape[0], 1, L, S))


def additive_mask(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    return F.scaled_dot_product_attention(
        q, k, v, torch.full((L, S), float("-inf")).triu(1), scale=0.5
    )


def lowest_value_mask(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.full((L, S), torch.finfo(q.dtype).min).triu(1)
    )


def shifted_mask(q, k, v):
    """Attends one key fewer than causal: not the causal pattern."""
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(L, S, dtype=torch.bool).tril(-1)
    mask[:, 0] = True
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def random_mask(q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    mask = (torch.rand(L, S) < 2).tril()  # causal, but drawn: it consumes random numbers
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def input_mask(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def compile_and_record(fn):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torchkiln.reset()
    return torchkiln.compile(fn, backend=backend), graphs


def sdpa_calls(gm):
    return gm.graph.find_nodes(op="call_function", target=F.scaled_dot_product_attention)


def qkv(queries=8, keys=8):
    return torch.randn(2, 4, queries, 16), torch.randn(2, 4, keys, 16), torch.randn(2, 4, keys, 16)


@pytest.mark.parametrize("fn", [arange_mask, additive_mask, lowest_value_mask])
@pytest.mark.parametrize("keys", [8, 12])
def test_a_causal_mask_of_constants_becomes_is_causal(fn, keys):
    compiled, graphs = compile_and_record(fn)
    q, k, v = qkv(8, keys)
    torch.testing.assert_close(compiled(q, k, v), fn(q, k, v))
    (call,) = sdpa_calls(graphs[0])
    assert call.kwargs["is_causal"] is True and call.kwargs["attn_mask"] is None
    assert call.kwargs.get("scale") == (0.5 if fn is additive_mask else None)
    assert not [n for n in graphs[0].graph.nodes if n.target in (torch.arange, torch.full)]


def test_a_mask_that_is_not_causal_stays():
    compiled, graphs = compile_and_record(shifted_mask)
    q, k, v = qkv()
    torch.testing.assert_close(compiled(q, k, v), shifted_mask(q, k, v))
    (call,) = sdpa_calls(graphs[0])
    assert not call.kwargs.get("is_causal", False)


def test_a_random_mask_stays_and_draws_as_in_eager():
    compiled, graphs = compile_and_record(random_mask)
    q, k, v = qkv()
    torch.manual_seed(0)
    got, after = compiled(q, k, v), torch.rand(3)
    torch.manual_seed(0)
    expected, expected_after = random_mask(q, k, v), torch.rand(3)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(after, expected_after)
    (call,) = sdpa_calls(graphs[0])
    assert not call.kwargs.get("is_causal", False)


def test_a_mask_the_caller_passes_stays():
    compiled, graphs = compile_and_record(input_mask)
    q, k, v = qkv()
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    torch.testing.assert_close(compiled(q, k, v, causal), input_mask(q, k, v, causal))
    other = torch.ones(8, 8, dtype=torch.bool)
    torch.testing.assert_close(compiled(q, k, v, other), input_mask(q, k, v, other))
    (call,) = sdpa_calls(graphs[0])
    assert not call.kwargs.get("is_causal", False)
