"""Ops torch registers as ordered side effects are traced as plain calls (``effect_as_call``).

torch 2.13 marks ``aten._linalg_check_errors`` (``torch.linalg.inv``'s check of a singular
matrix, ``solve``'s, ``cholesky``'s) as an effect, and its functionalization refuses it
without torch's own "effect tokens": every AOT backend failed to compile these functions.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln


def inverse_twice(a):
    return torch.linalg.inv(a) * 2 + torch.linalg.solve(a, a.sin())


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_linalg_inverse_and_solve_train_like_eager(backend):
    torchkiln.reset()
    compiled = torchkiln.compile(inverse_twice, backend=backend)
    a = (torch.randn(4, 4) + 4 * torch.eye(4)).requires_grad_()
    out = compiled(a)
    expected = inverse_twice(a)
    torch.testing.assert_close(out, expected)
    cotangent = torch.randn(4, 4)
    (grad,) = torch.autograd.grad(out, a, cotangent)
    torch.testing.assert_close(grad, torch.autograd.grad(expected, a, cotangent)[0])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_singular_matrix_raises_as_in_eager(backend):
    """The check stays in the graph, after the values it reads."""
    torchkiln.reset()
    compiled = torchkiln.compile(lambda a: torch.linalg.inv(a) * 2, backend=backend)
    compiled(torch.eye(3))
    with pytest.raises(torch.linalg.LinAlgError):
        compiled(torch.zeros(3, 3))
