"""A Triton kernel's run-time index outside its dimension fails a device-side assert.

The Triton kernels read and wrote wherever such an index pointed (the C++ ones check:
``test_index_bounds.py``): garbage out of a gather or an embedding, memory corrupted by a
scatter. Each run-time index is now asserted in range where it is read, as eager's CUDA
kernels do, and such kernels are compiled with Triton's ``debug`` on so the assert stays.
Triton's interpreter drops asserts unless its own options say debug: the tests turn it on.
On a GPU the assert is the device's, which ends the process's CUDA context: that test
runs a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torchkiln
from tests.plugins.inductor.inductor_testing import compile_fn

pytest.importorskip("triton", reason="triton is not installed")

TRITON = {"cpu_backend": "triton"}


def take(x, i):
    return x[i * 3] * 2


def embed(w, i):
    return torch.nn.functional.embedding(i, w) + 1


def scatter(x, i, v):
    return x.scatter_add(0, i, v)


#: name: (function, its inputs around an index tensor, an index tensor out of range)
CASES = {
    "x[i*3]": (take, lambda i: (torch.randn(5), i), torch.tensor([1, 2])),
    "embedding": (embed, lambda i: (torch.randn(5, 3), i), torch.tensor([0, 5])),
    "scatter_add": (scatter, lambda i: (torch.zeros(5), i, torch.ones(2)), torch.tensor([4, 5])),
}


INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture
def interpreter_asserts(monkeypatch):
    if not INTERPRETED:
        pytest.skip("runs CPU tensors through Triton's interpreter (TRITON_INTERPRET=1)")
    from triton.runtime import interpreter

    options = interpreter.InterpreterOptions(debug=True, sanitize_overflow=False)
    monkeypatch.setattr(interpreter.interpreter_builder, "options", options)


@pytest.mark.parametrize("case", CASES)
def test_an_index_out_of_range_fails_the_kernel(case, interpreter_asserts):
    fn, inputs, outside = CASES[case]
    torchkiln.reset()
    compiled = torchkiln.compile(fn, options=TRITON)
    inside = inputs(torch.tensor([1, 0]))
    torch.testing.assert_close(compiled(*inside), fn(*inside))
    with pytest.raises((IndexError, RuntimeError), match="out of (bounds|range)"):
        fn(*inputs(outside))
    with pytest.raises(Exception, match="index out of bounds"):
        compiled(*inputs(outside))


@pytest.mark.skipif(not INTERPRETED, reason="Triton's interpreter (TRITON_INTERPRET=1)")
def test_only_kernels_that_read_indices_compile_with_debug():
    def gather_and_sum(x, i):
        return ((x[i] + 1).sin() * x.sum(),)

    compiled = compile_fn(gather_and_sum, torch.randn(5), torch.tensor([1, 3]), **TRITON)
    kernels = compiled.artifact.triton.source.split("@triton.jit")[1:]
    checking = [k for k in kernels if "tl.device_assert" in k]
    assert len(checking) == 1 and len(kernels) > 2
    for kernel in kernels:
        assert kernel.startswith("(debug=True)") == (kernel in checking)


GPU_SCRIPT = textwrap.dedent(
    """
    import sys, torch, torchkiln
    def take(x, i):
        return x[i * 3] * 2
    x = torch.randn(5, device="cuda")
    compiled = torchkiln.compile(take)
    inside = torch.tensor([1, 0], device="cuda")
    torch.testing.assert_close(compiled(x, inside), take(x, inside))
    print("in range: ok", flush=True)
    compiled(x, torch.tensor([1, 2], device="cuda"))
    torch.cuda.synchronize()
    print("out of range: no error", flush=True)
    """
)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_index_out_of_range_fails_the_kernel_on_the_gpu():
    out = subprocess.run([sys.executable, "-c", GPU_SCRIPT], capture_output=True, text=True)
    assert "in range: ok" in out.stdout, out.stderr
    assert out.returncode != 0 and "no error" not in out.stdout
    assert "device-side assert" in out.stderr, out.stderr[-2000:]
