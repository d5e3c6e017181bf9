"""The user's saved-tensor hooks see real tensors only: capture and the AOT layer trace with
them paused (core/saved_hooks.py), and the compiled code saves through them as eager does."""

import pytest
import torch

import torchkiln


def fn(x, w):
    return (x @ w).sin().sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_hooks_active_at_the_first_call_see_only_real_tensors(backend):
    packed = []

    def pack(t):
        packed.append(type(t))
        return t

    compiled = torchkiln.compile(fn, backend=backend)
    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    x_eager, w_eager = (t.detach().clone().requires_grad_() for t in (x, w))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = compiled(x, w)
    out.backward()
    fn(x_eager, w_eager).backward()
    torch.testing.assert_close(out, fn(x_eager, w_eager))
    torch.testing.assert_close((x.grad, w.grad), (x_eager.grad, w_eager.grad))
    assert packed and set(packed) == {torch.Tensor}


def test_hooks_may_be_registered_again_after_a_compile():
    compiled = torchkiln.compile(fn, backend="aot_eager")
    compiled(torch.randn(3, 3, requires_grad=True), torch.randn(3, 3))
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        torch.randn(2, requires_grad=True).sin()
    assert len(packed) == 1
