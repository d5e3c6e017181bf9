"""Extern aten calls go through torch's Python binding where it can only run the same overload
(``codegen/extern_calls``), through the overload's C op elsewhere."""

import pytest
import torch
from inductor_testing import check

from torchkiln_inductor.codegen.extern_calls import binding_picks_only, python_binding

aten = torch.ops.aten


def test_a_call_shape_only_one_overload_accepts_uses_the_binding():
    assert binding_picks_only(aten.mm.default, 2, ())
    assert binding_picks_only(aten.addmm.default, 3, {"beta", "alpha"})
    assert binding_picks_only(aten.mm.dtype, 3, ())  # mm.default takes two
    assert python_binding(aten.addmm.default) is torch._C._VariableFunctions.addmm


def test_a_call_shape_two_overloads_accept_keeps_the_c_op():
    # aten.add.Tensor and aten.add.Scalar both take two positional arguments (and add is not
    # an op whose binding's signatures were read)
    assert not binding_picks_only(aten.add.Tensor, 2, ())
    # a keyword another overload takes, or a call this overload does not accept
    assert not binding_picks_only(aten.mm.default, 2, {"out_dtype"})
    assert not binding_picks_only(aten.mm.default, 3, ())


def test_the_binding_picks_the_overload_it_was_chosen_for():
    """On CPU, mm.dtype has no kernel: the binding with mm.default's call shape runs
    mm.default, with mm.dtype's it reaches mm.dtype."""
    a = torch.randn(3, 3)
    torch.testing.assert_close(python_binding(aten.mm.default)(a, a), a @ a)
    with pytest.raises(NotImplementedError, match=r"aten::mm\.dtype"):
        python_binding(aten.mm.dtype)(a, a, torch.float16)


def matmuls(x, w, b, v):
    return torch.addmm(b, x, w, beta=0.5, alpha=2.0) @ v, torch.bmm(x[None], w[None])


def test_a_graph_calls_its_matmuls_through_their_bindings():
    args = (torch.randn(4, 5), torch.randn(5, 6), torch.randn(6), torch.randn(6, 3))
    compiled = check(matmuls, *args)
    source = compiled.artifact.wrapper_source
    assert "aten_addmm_default = _python_binding(aten_addmm_default)" in source
    assert "aten_mm_default = _python_binding(aten_mm_default)" in source
    fresh = tuple(torch.randn_like(a) for a in args)  # a second call, other values
    for actual, expected in zip(compiled(*fresh), matmuls(*fresh), strict=True):
        torch.testing.assert_close(actual, expected)
