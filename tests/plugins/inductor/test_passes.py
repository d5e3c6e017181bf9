"""Graph passes: dead code, no-op ops, constant folding, common subexpressions."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln_inductor.passes import (
    MAX_FOLDED_ELEMENTS,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    remove_noop_ops,
)

aten = torch.ops.aten


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_dead_code_is_removed():
    gm = make_fx(lambda x: (x.sin(), x.cos())[0])(torch.randn(3))
    eliminate_dead_code(gm)
    assert aten.cos.default not in targets(gm)


def test_noop_clone_and_view_are_removed_but_not_at_outputs():
    gm = make_fx(lambda x: (x.clone().view(3, 2) + 1, x.clone()))(torch.randn(3, 2))
    remove_noop_ops(gm)
    assert targets(gm).count(aten.clone.default) == 1
    assert aten.view.default not in targets(gm)


def test_constant_subgraph_is_folded():
    const = torch.arange(6.0)

    def fn(x):
        return x + (const * 2).exp()

    gm = make_fx(fn)(torch.randn(6))
    folded = fold_constants(gm)
    eliminate_dead_code(gm)
    gm.recompile()
    assert folded >= 1 and aten.exp.default not in targets(gm)
    x = torch.randn(6)
    torch.testing.assert_close(gm(x), fn(x))


def causal_mask_like_transformers(x):
    """The mask GPT-2 builds from nothing but sizes: ``arange`` through ``cumsum``,
    ``index`` and compares (five kernels a call, unless folded)."""
    pos = torch.arange(x.shape[1]).unsqueeze(0).expand(x.shape[0], -1)
    seq = torch.cat([pos[:, :1] - 1, pos], -1).diff(dim=-1).ne(1).cumsum(-1)
    rows, cols = torch.arange(x.shape[1]).view(-1, 1), torch.arange(x.shape[1]).view(1, -1)
    mask = (cols <= rows) & (seq[:, None, :, None] == seq[:, None, None, :])
    return x.masked_fill(~mask[:, 0], 0.0)


def test_factory_rooted_subgraph_is_folded_and_its_attributes_kept_lean():
    x = torch.randn(2, 8, 8)
    gm = make_fx(causal_mask_like_transformers)(x)
    assert fold_constants(gm) >= 5
    eliminate_dead_code(gm)
    gm.recompile()
    assert aten.cumsum.default not in targets(gm) and aten.arange.default not in targets(gm)
    folded = [name for name, _ in gm.named_buffers() if name.startswith("_folded_constant_")]
    assert len(folded) == sum(n.op == "get_attr" for n in gm.graph.nodes)
    x = torch.randn(2, 8, 8)
    torch.testing.assert_close(gm(x), causal_mask_like_transformers(x))


def test_a_returned_factory_value_is_a_new_tensor_at_every_call():
    def fn(x):
        return x + 1, torch.arange(4.0) * 2

    compiled = torchkiln.compile(fn)
    first = compiled(torch.randn(4))[1]
    first.add_(100)  # the caller owns its outputs
    torch.testing.assert_close(compiled(torch.randn(4))[1], torch.arange(4.0) * 2)


def test_a_large_factory_value_is_not_folded():
    n = MAX_FOLDED_ELEMENTS + 1
    gm = make_fx(lambda x: x + torch.zeros(n).exp())(torch.randn(n))
    assert fold_constants(gm) == 0


def test_a_mask_made_contiguous_for_every_layer_is_one_buffer():
    """transformers hands each attention layer the same expanded mask; each call's
    ``contiguous()`` is the same value, so the graph keeps one."""

    def fn(q, mask):
        mask = mask.expand(2, 1, 4, 4)
        for _ in range(3):
            q = q + torch.nn.functional.scaled_dot_product_attention(q, q, q, mask.contiguous())
        return q

    q, mask = torch.randn(2, 1, 4, 8), torch.randn(1, 1, 4, 4)
    gm = make_fx(fn)(q, mask)
    assert targets(gm).count(aten.clone.default) == 3
    assert eliminate_common_subexpressions(gm) >= 2
    gm.recompile()
    assert targets(gm).count(aten.clone.default) == 1
    torch.testing.assert_close(gm(q, mask), fn(q, mask))


def test_random_ops_outputs_and_mutated_values_are_not_merged():
    def fn(x):
        a, b = torch.rand_like(x), torch.rand_like(x)  # two draws, not one
        c = x.clone()
        c.add_(1)  # a mutated value is not shared with another clone
        return a + b + c + x.clone(), x.clone(), x.clone()

    x = torch.randn(4)
    gm = make_fx(fn)(x)
    assert eliminate_common_subexpressions(gm) == 0
    gm.recompile()
    torch.manual_seed(0)
    expected = fn(x)
    torch.manual_seed(0)
    torch.testing.assert_close(gm(x), expected)
