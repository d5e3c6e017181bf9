"""Calling conventions every backend must keep: what eager does with inputs, outputs and memory."""

from __future__ import annotations

import torch

from torchkiln.testing.compare import Target, assert_same, run_compared


def mutated_inputs(target: Target) -> None:
    """In-place updates of arguments (one of them through a view) are seen by the caller."""

    def fn(x, y, acc):
        acc.add_(x * y)
        x.mul_(2)
        y[:, 0].zero_()
        return x + acc

    d = target.device
    run_compared(
        target,
        fn,
        lambda: (
            torch.randn(3, 4, device=d),
            torch.randn(3, 4, device=d),
            torch.randn(3, 4, device=d),
        ),
    )


def multiple_outputs(target: Target) -> None:
    """Tuples, dicts and named tuples of outputs, some requiring grad, with gradients."""

    def fn(x, y):
        top = (x * y).max(dim=1)
        return {"sum": x + y, "pair": (x.sin(), top), "count": (y > 0).sum()}

    d = target.device
    run_compared(
        target,
        fn,
        lambda: (torch.randn(3, 4, device=d, requires_grad=True), torch.randn(3, 4, device=d)),
        grads=True,
    )


def aliasing_outputs(target: Target) -> None:
    """Outputs that are inputs, views of inputs, or views of one another share memory as in eager."""

    def fn(x, y):
        z = y * 2
        return x, x.view(-1), x.t(), z, z[1:], y.add_(1)

    d = target.device
    run_compared(
        target,
        fn,
        lambda: (torch.randn(3, 4, device=d), torch.randn(3, 4, device=d)),
        aliasing=True,
    )


def non_contiguous_inputs(target: Target) -> None:
    """Transposed, strided and expanded (stride 0) inputs, with gradients."""

    def fn(x, y, z):
        return (x * 2 + y - z).tanh()

    d = target.device

    def args():
        x = torch.randn(4, 3, device=d).t().requires_grad_()
        y = torch.randn(3, 8, device=d)[:, ::2]
        z = torch.randn(1, 4, device=d).expand(3, 4)
        return x, y, z

    run_compared(target, fn, args, grads=True)


def scalars(target: Target) -> None:
    """Python numbers and 0-dim tensors as arguments; a 0-dim tensor out."""

    def fn(x, scale, shift, t):
        return x * scale + shift, (x.sum() * t).exp(), t + 1

    d = target.device
    run_compared(
        target,
        fn,
        lambda: (torch.randn(3, 4, device=d), 0.5, 3, torch.tensor(0.1, device=d)),
    )


def results_do_not_alias_across_calls(target: Target) -> None:
    """A result stays as it was after the next call: no internal buffer is handed out twice."""

    def fn(x):
        return (x * 2).relu() + 1, x.sin()

    d = target.device
    for grad in (False, True):
        before = target.graphs
        compiled = target.compile(fn)
        first_input = torch.randn(8, 8, device=d, requires_grad=grad)
        first = compiled(first_input)
        kept = [t.detach().clone() for t in first]
        second = compiled(torch.randn(8, 8, device=d, requires_grad=grad))
        assert_same(
            [t.detach() for t in first], kept, f"first result after a second call (grad={grad})"
        )
        assert_same(list(first), list(fn(first_input)), f"first result (grad={grad})")
        ptrs = {t.untyped_storage().data_ptr() for t in first}
        for i, t in enumerate(second):
            assert t.untyped_storage().data_ptr() not in ptrs, (
                f"output {i} of the second call (grad={grad}) reuses the memory of the first's"
            )
        assert target.graphs > before, f"no graph reached backend {target.backend!r}"
