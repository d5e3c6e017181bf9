"""A backward compiler that needs concrete sizes (``NeedsStaticShapes``) gets the backward
once per size: the backward compiles at its first call, where no caller of the backend
catches the error (it failed the training step)."""

from __future__ import annotations

import torch

import torchkiln
import torchkiln.aot as aot
from torchkiln.exc import NeedsStaticShapes


def test_backward_that_needs_static_shapes_compiles_per_size():
    compiled_for = []

    def forward_compiler(gm, example_inputs):
        return gm.forward

    def backward_compiler(gm, example_inputs):
        sizes = [tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)]
        if any(isinstance(s, torch.SymInt) for shape in sizes for s in shape):
            raise NeedsStaticShapes("this backward needs concrete sizes")
        compiled_for.append(sizes)
        return gm.forward

    backend = aot.aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)
    torchkiln.reset()
    step = torchkiln.compile(lambda x, w: (x @ w).tanh().sum(), backend=backend, dynamic=True)
    w = torch.randn(4, 4, requires_grad=True)
    for n in (3, 5, 3):
        x = torch.randn(n, 4, requires_grad=True)
        step(x, w).backward()
        x_ref, w_ref = x.detach().requires_grad_(), w.detach().requires_grad_()
        (x_ref @ w_ref).tanh().sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        torch.testing.assert_close(w.grad, w_ref.grad)
        w.grad = None
    assert len(compiled_for) == 2  # sizes 3 and 5
