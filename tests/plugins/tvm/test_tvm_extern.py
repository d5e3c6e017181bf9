"""Matmuls and convolutions through torch's kernels (``extern_ops``, on by default on CPU)
against eager, and TVM's own loops when the option is off, their products added up in
the dtype torch's CPU kernels use."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from tests.plugins.tvm.tvm_checks import assert_all_in_tvm, partition_log

pytest.importorskip("tvm", reason="the tvm backend needs apache-tvm: pip install 'torchkiln[tvm]'")

import tvm
import tvm_ffi

from torchkiln_tvm import extern
from torchkiln_tvm.compiler import decompositions, to_relax

#: torch's kernels, by the names the compiled modules call them by.
KERNELS = {
    extern.MATMUL: extern.matmul,
    extern.ADDMM: extern.addmm,
    extern.CONVOLUTION: extern.convolution,
}


@pytest.fixture
def torch_kernel_calls(monkeypatch, tmp_path):
    """How many times the compiled graphs called each of torch's kernels: wrappers
    registered in their place before the graphs' VMs are made (which look them up)."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    calls = collections.Counter()

    def counting(name, fn):
        return lambda *args: calls.update([name]) or fn(*args)

    for name, fn in KERNELS.items():
        tvm_ffi.register_global_func(name, counting(name, fn), override=True)
    yield calls
    for name, fn in KERNELS.items():
        tvm_ffi.register_global_func(name, fn, override=True)


def matmuls(x, w, bias, q, k):
    return (
        x @ w.t(),  # a linear layer's transposed weight, read where it lies
        F.linear(x, w, bias),
        torch.addmm(bias, x, w, beta=0.5, alpha=2),
        q @ k.transpose(-2, -1),  # a batched transposed operand
        torch.bmm(q, k.transpose(-2, -1).contiguous()),
        x.t() @ x,  # the transposed operand is the graph's input
        q @ w,  # batched by 2-d: a view and a mm
    )


def matmul_inputs(dtype=torch.float32):
    x = torch.randn(12, 16, dtype=dtype)
    return (
        x[::2, :],  # non-contiguous: every other row
        torch.randn(16, 16, dtype=dtype).t(),  # non-contiguous: a transpose
        torch.randn(16, dtype=dtype),
        torch.randn(3, 5, 16, dtype=dtype),
        torch.randn(3, 7, 16, dtype=dtype),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_matmuls_match_eager(dtype, torch_kernel_calls, caplog):
    compiled = torchkiln.compile(matmuls, backend="tvm")
    with partition_log(caplog):
        compiled(*matmul_inputs(dtype))
    assert_all_in_tvm(caplog.text)
    inputs = matmul_inputs(dtype)  # fresh values, same shapes and strides: no new compile
    torch.testing.assert_close(compiled(*inputs), matmuls(*inputs))
    assert torch_kernel_calls[extern.MATMUL] == 2 * 5
    assert torch_kernel_calls[extern.ADDMM] == 2 * 2


def convolutions(x, w, bias, w_grouped, x1, w1, x3, w3):
    return (
        F.conv2d(x, w, bias, stride=2, padding=1),
        F.conv2d(x, w_grouped, None, padding=2, dilation=2, groups=3),
        F.conv1d(x1, w1, None, stride=3, padding=1),
        F.conv3d(x3, w3, None, padding=(0, 1, 1)),
    )


def convolution_inputs():
    return (
        torch.randn(2, 8, 8, 3).permute(0, 3, 1, 2),  # non-contiguous: channels last
        torch.randn(4, 3, 3, 3),
        torch.randn(4),
        torch.randn(6, 1, 3, 3),
        torch.randn(2, 3, 17),
        torch.randn(5, 3, 4),
        torch.randn(1, 2, 3, 5, 5),
        torch.randn(4, 2, 1, 3, 3),
    )


def test_torch_convolutions_match_eager(torch_kernel_calls, caplog):
    compiled = torchkiln.compile(convolutions, backend="tvm")
    with partition_log(caplog):
        compiled(*convolution_inputs())
    assert_all_in_tvm(caplog.text)
    inputs = convolution_inputs()
    torch.testing.assert_close(compiled(*inputs), convolutions(*inputs))
    assert torch_kernel_calls[extern.CONVOLUTION] == 2 * 4


def test_torch_kernels_in_a_model_with_training(torch_kernel_calls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5)
    )
    compiled = torchkiln.compile(model, backend="tvm")
    x = torch.randn(2, 3, 8, 8)
    out, expected = compiled(x), model(x)
    torch.testing.assert_close(out, expected)
    params = list(model.parameters())
    torch.testing.assert_close(
        torch.autograd.grad(out.sum(), params), torch.autograd.grad(expected.sum(), params)
    )
    assert torch_kernel_calls[extern.CONVOLUTION] == 1
    assert torch_kernel_calls[extern.ADDMM] == 1
    assert torch_kernel_calls[extern.MATMUL] > 0  # the backward's matmuls


def test_extern_ops_off_keeps_tvm_loops(torch_kernel_calls, caplog):
    options = {"extern_ops": False}
    compiled = torchkiln.compile(matmuls, backend="tvm", options=options)
    with partition_log(caplog):
        compiled(*matmul_inputs())
    assert_all_in_tvm(caplog.text)
    inputs = matmul_inputs()
    torch.testing.assert_close(compiled(*inputs), matmuls(*inputs))
    compiled = torchkiln.compile(convolutions, backend="tvm", options=options)
    inputs = convolution_inputs()
    torch.testing.assert_close(compiled(*inputs), convolutions(*inputs))
    assert not torch_kernel_calls


def relax_main(fn, *inputs, extern_ops: bool):
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    mod, _ = to_relax(gm, extern_ops=extern_ops)
    return mod["main"]


def matmul_dtypes(main) -> list[str]:
    """The dtype each ``R.matmul`` of ``main`` adds its products up in (its result's)."""
    return [
        binding.var.ty.dtype
        for block in main.body.blocks
        for binding in block.bindings
        if getattr(binding.value, "op", None) == tvm.ir.Op.get("relax.matmul")
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tvm_matmuls_add_up_in_the_inputs_dtype(dtype):
    """float32 products are added in float32, as torch's BLAS does (in float64 a matmul
    took twice as long); float64 ones in float64."""
    x, w, bias = (torch.randn(*shape, dtype=dtype) for shape in ((4, 8), (8, 3), (3,)))
    main = relax_main(lambda x, w, b: (x @ w, torch.addmm(b, x, w)), x, w, bias, extern_ops=False)
    assert matmul_dtypes(main) == [str(dtype).removeprefix("torch.")] * 2, main.script()


def test_tvm_matmuls_of_half_types_add_up_in_float32():
    x, w = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8, 3, dtype=torch.bfloat16)
    assert matmul_dtypes(relax_main(torch.mm, x, w, extern_ops=False)) == ["float32"]


def test_extern_ops_replace_the_tvm_matmuls_and_convolutions():
    x, w, k = torch.randn(4, 8), torch.randn(3, 8), torch.randn(3, 2, 3, 3)
    script = relax_main(
        lambda x, w, k: (F.linear(x, w), F.conv2d(x.view(1, 2, 4, 4), k)), x, w, k, extern_ops=True
    ).script()
    assert "R.matmul" not in script and "R.nn.conv2d" not in script, script
    # the weight as it lies, flagged transposed
    assert f'R.call_dps_packed("{extern.MATMUL}", (x_1, w_1, {extern.TRANSPOSED_B})' in script
    # torch's convolution result itself (no buffer of the VM's to copy it into)
    assert f'R.call_pure_packed("{extern.CONVOLUTION}"' in script, script
