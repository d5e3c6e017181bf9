"""Graph passes: dead code, no-op ops, constant folding."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln_inductor.passes import eliminate_dead_code, fold_constants, remove_noop_ops

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
