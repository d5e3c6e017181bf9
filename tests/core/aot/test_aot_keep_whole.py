"""Ops whose decompositions are wrong stay whole, whatever table a backend passes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions

import torchkiln
from torchkiln.aot import KEEP_WHOLE, aot_autograd, core_aten_table, default_decompositions

FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_default_table_keeps_cpu_flash_attention_whole():
    assert FLASH_CPU in KEEP_WHOLE
    assert FLASH_CPU not in default_decompositions()


def test_core_aten_table_is_torchs_without_the_ops_kept_whole():
    """The table backends that convert aten graphs start from: torch's core-aten
    decompositions (torch.export's adds only CompositeImplicitAutograd ops), hazards out."""
    table, torchs = core_aten_table(), core_aten_decompositions()
    assert FLASH_CPU not in table
    assert table.keys() <= torchs.keys()
    assert torch.ops.aten.addcmul.default in table  # a core-aten decomposition, as an example


def test_torch_core_aten_table_gives_eager_attention_gradients():
    assert FLASH_CPU in core_aten_decompositions()  # the hazard: torch decomposes it
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    table = dict(core_aten_decompositions())
    compiled = torchkiln.compile(
        attention, backend=aot_autograd(fw_compiler=record, decompositions=table)
    )
    q, k, v = (torch.randn(2, 3, 6, 4, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(2, 3, 6, 4)
    out = compiled(q, k, v)
    out.backward(grad_out)
    grads = [t.grad for t in (q, k, v)]
    q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
    expected = attention(q2, k2, v2)
    expected.backward(grad_out)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, [q2.grad, k2.grad, v2.grad])
    assert FLASH_CPU in {n.target for n in graphs[0].graph.nodes}
