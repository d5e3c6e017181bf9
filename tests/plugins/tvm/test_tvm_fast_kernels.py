"""The CPU kernels' fast paths against eager: fast math, row reductions, powers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchkiln
from tests.plugins.tvm.tvm_checks import assert_all_in_tvm, partition_log

tvm = pytest.importorskip("tvm", reason="needs apache-tvm: pip install 'torchkiln[tvm]'")


def transcendental(x):
    return torch.exp(x), torch.tanh(x), torch.erf(x), torch.sigmoid(x)


def activations(x):
    return F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x)


def normal_at_scales() -> torch.Tensor:
    return torch.cat([torch.randn(3, 256) * scale for scale in (1, 10, 100)])


def special() -> torch.Tensor:
    """Where the polynomials clamp, saturate or overflow; infinities and NaN."""
    values = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 88.7, 88.73, -87.5]
    values += [-104.0, 9.0, -9.0, 8.5, 4.0, 1e-5, -3e-4, -0.5]
    return torch.tensor(values)


@pytest.mark.parametrize("fn", [transcendental, activations])
def test_fast_math_matches_eager_on_wide_inputs(fn, caplog):
    """Within the float32 tolerance at scales 1 to 100, NaN and infinities as torch (the
    activations on finite values: torch's GELU of +inf is NaN, TVM's inf)."""
    compiled = torchkiln.compile(fn, backend="tvm")
    with partition_log(caplog):
        compiled(normal_at_scales())
    assert_all_in_tvm(caplog.text)
    x = normal_at_scales()
    x[0, :16] = special()
    if fn is activations:
        x = torch.nan_to_num(x, nan=0.0, posinf=1e4, neginf=-1e4)
    for got, expected in zip(compiled(x), fn(x)):
        torch.testing.assert_close(got, expected, equal_nan=True)


def kernels(build, shape=(64, 1024), **passes) -> dict:
    """The fused TIR kernels of the Relax function ``build(bb, x)``, by name."""
    from tvm import relax

    from torchkiln_tvm import schedule, targets

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(list(shape), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    target = targets.host()
    with target:
        mod = tvm.transform.Sequential(schedule.kernel_passes(target, **passes))(bb.get())
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.parametrize("fast_math", [True, False])
def test_fast_math_leaves_no_libm_call(fast_math):
    from tvm.relax import op as R

    (kernel,) = kernels(lambda bb, x: R.nn.gelu(R.tanh(R.exp(x))), fast_math=fast_math).values()
    calls = [name for name in ("T.exp(", "T.tanh(", "T.erf(") if name in kernel.script()]
    assert calls == ([] if fast_math else ["T.exp(", "T.tanh(", "T.erf("])


def row_reductions(x):
    normed = F.layer_norm(x, x.shape[-1:])
    return F.softmax(normed * 4, dim=-1), x.var(dim=-1), x.mean(dim=-1), x.sum(dim=-1)


def test_row_reductions_match_eager(caplog):
    """Rows long enough for the vectorized row schedule (1024 columns, lanes of 16)."""
    compiled = torchkiln.compile(row_reductions, backend="tvm")
    with partition_log(caplog):
        compiled(torch.randn(16, 1024))
    assert_all_in_tvm(caplog.text)
    x = torch.randn(16, 1024) * 3 + 1
    torch.testing.assert_close(compiled(x), row_reductions(x))


@pytest.mark.parametrize("op", ["softmax", "squares", "float64 sum"])
def test_row_reductions_are_vectorized(op):
    """Each reduction is split into lane-wise partial results (``rfactor``), vectorized."""
    from tvm.relax import op as R

    from torchkiln_tvm import schedule, targets

    build = {
        "softmax": lambda bb, x: R.nn.softmax(x, 1),
        "squares": lambda bb, x: R.sum(R.multiply(x, x), [1]),
        "float64 sum": lambda bb, x: R.sum(R.astype(x, "float64"), [1]),
    }[op]
    (kernel,) = [f for name, f in kernels(build).items() if "sum" in name or "softmax" in name]
    scheduled = schedule.LoopOrder().apply(kernel, targets.host(), False)
    assert scheduled is not None
    script = scheduled.mod.script()
    assert "_rf" in script and "T.vectorized" in script


def powers(x, a):
    return x**2, x**3, a**-1, a**-2, a**0.5, a**-0.5, a**1.7, x**2.0


def test_powers_match_eager():
    compiled = torchkiln.compile(powers, backend="tvm")
    x, a = torch.randn(8, 32) * 10, torch.rand(8, 32) + 0.1
    torch.testing.assert_close(compiled(x, a), powers(x, a))


def test_small_integer_powers_are_products():
    """``x ** 3`` (GPT-2's GELU) as products: TVM's ``power`` is a libm call a lane."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchkiln_tvm.compiler import to_relax

    mod, _ = to_relax(make_fx(lambda x: x**3 + x**2)(torch.randn(4, 4)))
    assert "power" not in mod.script()
