"""A Triton kernel's run-time index outside its dimension fails a device-side assert.

The Triton kernels read and wrote wherever such an index pointed (the C++ ones check:
``test_index_bounds.py``): garbage out of a gather or an embedding, memory corrupted by a
scatter. Each run-time index is now asserted in range where it is read, as eager's CUDA
kernels do, and such kernels are compiled with Triton's ``debug`` on so the assert stays.
Triton's interpreter drops asserts unless its own options say debug: the tests turn it on.
"""

from __future__ import annotations

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


@pytest.fixture
def interpreter_asserts(monkeypatch):
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


def test_only_kernels_that_read_indices_compile_with_debug():
    def gather_and_sum(x, i):
        return ((x[i] + 1).sin() * x.sum(),)

    compiled = compile_fn(gather_and_sum, torch.randn(5), torch.tensor([1, 3]), **TRITON)
    kernels = compiled.artifact.triton.source.split("@triton.jit")[1:]
    checking = [k for k in kernels if "tl.device_assert" in k]
    assert len(checking) == 1 and len(kernels) > 2
    for kernel in kernels:
        assert kernel.startswith("(debug=True)") == (kernel in checking)
