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


def filled_mask(q, k, v):
    """Causal as its ops compute it, then overwritten in place: not causal when used."""
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    mask.fill_(True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def mask_set_through_a_view(q, k, v):
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    mask.view(-1)[1] = True
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def mask_anded_in_place(q, k, v):
    """As transformers combines mask functions: ``&=`` into the comparison's result."""
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.arange(S)[None, :] <= torch.arange(L)[:, None]
    mask &= torch.ones(L, S, dtype=torch.bool)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def mask_written_after_use(q, k, v):
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    mask.fill_(False)
    return out, mask


def full_mask(q, k, v):
    """Attends everywhere: the same as no mask."""
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.zeros(q.shape[-2], k.shape[-2]), dropout_p=0.0
    )


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


@pytest.mark.parametrize(
    "fn",
    [arange_mask, additive_mask, lowest_value_mask, mask_anded_in_place, mask_written_after_use],
)
@pytest.mark.parametrize("keys", [8, 12])
def test_a_causal_mask_of_constants_becomes_is_causal(fn, keys):
    compiled, graphs = compile_and_record(fn)
    q, k, v = qkv(8, keys)
    torch.testing.assert_close(compiled(q, k, v), fn(q, k, v))
    (call,) = sdpa_calls(graphs[0])
    assert call.kwargs["is_causal"] is True and call.kwargs["attn_mask"] is None
    assert call.kwargs.get("scale") == (0.5 if fn is additive_mask else None)
    assert not [n for n in graphs[0].graph.nodes if n.target in (torch.arange, torch.full)]


@pytest.mark.parametrize("fn", [shifted_mask, filled_mask, mask_set_through_a_view])
def test_a_mask_that_is_not_causal_stays(fn):
    compiled, graphs = compile_and_record(fn)
    q, k, v = qkv()
    torch.testing.assert_close(compiled(q, k, v), fn(q, k, v))
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


def test_a_mask_that_attends_everywhere_is_dropped():
    compiled, graphs = compile_and_record(full_mask)
    q, k, v = qkv()
    torch.testing.assert_close(compiled(q, k, v), full_mask(q, k, v))
    (call,) = sdpa_calls(graphs[0])
    assert call.kwargs["attn_mask"] is None and call.kwargs["is_causal"] is False


@pytest.mark.parametrize("model", ["LlamaForCausalLM", "GPT2LMHeadModel"])
def test_transformers_mask_built_under_compilation_becomes_is_causal(model, monkeypatch):
    """transformers 5.17 builds the mask under compilation (5.18 skips it as eager does when
    no padding mask is passed): forced here, through its own mask functions."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    monkeypatch.setattr(
        transformers.masking_utils, "_ignore_causal_mask_sdpa", lambda *a, **k: False
    )
    small = dict(num_hidden_layers=2, num_attention_heads=2, vocab_size=64)
    if model == "LlamaForCausalLM":
        config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, **small)
    else:
        config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64)
    torch.manual_seed(0)
    net = getattr(transformers, model)(config).eval()
    net.config._attn_implementation = "sdpa"
    compiled, graphs = compile_and_record(lambda ids: net(ids).logits)
    ids = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), net(ids).logits)
    calls = sdpa_calls(graphs[0])
    assert len(calls) == 2 and all(c.kwargs["is_causal"] is True for c in calls)


def diagonal_from_sizes_mask(q, k, v):
    """``tril`` shifted by ``L // 8``: causal while there are fewer than 8 queries only."""
    L, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(L, S, dtype=torch.bool).tril(L // 8)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("fn", [arange_mask, additive_mask, mask_anded_in_place])
def test_a_causal_mask_of_symbolic_sizes_becomes_is_causal_for_every_size(fn):
    graphs = []
    torchkiln.reset()
    compiled = torchkiln.compile(fn, backend=graphs_backend(graphs), dynamic=True)
    for length in (5, 9, 16, 23):
        q, k, v = qkv(length, length)
        torch.testing.assert_close(compiled(q, k, v), fn(q, k, v))
    assert len(graphs) == 1  # one graph for every size, its guard computing each size's mask
    (call,) = sdpa_calls(graphs[0])
    assert call.kwargs["attn_mask"] is None and call.kwargs["is_causal"] is True


def test_a_mask_of_sizes_causal_at_some_sizes_only_is_guarded_by_its_value():
    graphs = []
    torchkiln.reset()
    compiled = torchkiln.compile(
        diagonal_from_sizes_mask, backend=graphs_backend(graphs), dynamic=True
    )
    for length in (4, 6, 12, 5, 20, 7):  # causal below 8 queries, not from 8 on
        q, k, v = qkv(length, length)
        torch.testing.assert_close(compiled(q, k, v), diagonal_from_sizes_mask(q, k, v))
    causal = [g for g in graphs if sdpa_calls(g)[0].kwargs.get("is_causal")]
    masked = [g for g in graphs if sdpa_calls(g)[0].kwargs.get("attn_mask") is not None]
    assert len(causal) == 1 and len(masked) == 1 and len(graphs) == 2


def graphs_backend(graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend


def test_transformers_mask_of_a_symbolic_length_becomes_is_causal():
    """Under compilation transformers 5.18 builds GPT-2's mask from the sequence length
    (and a packed-sequence check of position ids it makes from it): with dynamic sizes."""
    transformers = pytest.importorskip("transformers", reason="needs transformers")
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64)
    torch.manual_seed(0)
    net = transformers.GPT2LMHeadModel(config).eval()
    net.config._attn_implementation = "sdpa"
    graphs = []
    torchkiln.reset()
    compiled = torchkiln.compile(
        lambda ids: net(ids).logits, backend=graphs_backend(graphs), dynamic=True
    )
    with torch.no_grad():
        for length in (7, 12, 30):
            ids = torch.randint(0, 64, (2, length))
            torch.testing.assert_close(compiled(ids), net(ids).logits)
    assert len(graphs) == 1
    calls = sdpa_calls(graphs[0])
    assert len(calls) == 2 and all(c.kwargs["is_causal"] is True for c in calls)


def test_a_mask_of_sizes_and_an_input_stays_with_symbolic_sizes():
    """A padding mask read from an input anded into the causal one: its value depends on
    data, so no guard of sizes can stand for it."""

    def padded(q, k, v, keep):
        L, S = q.shape[-2], k.shape[-2]
        mask = (torch.arange(S)[None, :] <= torch.arange(L)[:, None]) & keep[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    graphs = []
    torchkiln.reset()
    compiled = torchkiln.compile(padded, backend=graphs_backend(graphs), dynamic=True)
    for length in (6, 11):
        q, k, v = qkv(length, length)
        keep = torch.ones(2, length, dtype=torch.bool)
        keep[:, 0] = True
        keep[1, length // 2 :] = False
        torch.testing.assert_close(compiled(q, k, v, keep), padded(q, k, v, keep))
    assert len(graphs) == 1
    (call,) = sdpa_calls(graphs[0])
    assert call.kwargs.get("is_causal", False) is False and call.kwargs["attn_mask"] is not None
