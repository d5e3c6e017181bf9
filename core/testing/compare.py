"""Run a function or a module eagerly and with the backend under test; assert they agree.

Each call gets fresh random inputs, cloned for eager and for the compiled twin, so
mutated inputs are compared as well as outputs (and gradients, when training).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

import torchkiln
from torchkiln.api import resolve_backend
from torchkiln.exc import BackendCompilerFailed


@dataclass
class Target:
    """The backend under test: compiles with it exactly as ``torchkiln.compile(backend=name)``
    would, and counts the graphs it gets, so that no check passes on eager alone."""

    backend: str
    device: str = "cpu"
    graphs: int = 0

    def compile(
        self, fn: Any, *, mode: str | None = None, options: Mapping[str, Any] | None = None
    ) -> Any:
        graph_compiler = resolve_backend(self.backend, mode, options)

        def counted(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
            self.graphs += 1
            try:
                return graph_compiler(gm, example_inputs)
            except BackendCompilerFailed as e:  # torchkiln.compile wraps it again
                raise e.inner from None

        counted.__name__ = self.backend
        return torchkiln.compile(fn, backend=counted)


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def assert_same(actual: Any, expected: Any, what: str) -> None:
    """Same structure, same non-tensor values, tensors close (and the same ``requires_grad``)."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"{what}: structure {a_spec} differs from eager's {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        where = f"{what}, leaf {i}"
        if not isinstance(e, torch.Tensor):
            assert a == e, f"{where}: {a!r} != eager's {e!r}"
            continue
        assert isinstance(a, torch.Tensor), f"{where}: {type(a).__name__}, eager gives a tensor"
        torch.testing.assert_close(a, e, msg=lambda m, where=where: f"{where}: {m}")
        assert a.requires_grad == e.requires_grad, (
            f"{where}: requires_grad={a.requires_grad}, eager's is {e.requires_grad}"
        )


def _storages(tensors: list[torch.Tensor]) -> list[int]:
    return [t.untyped_storage().data_ptr() for t in tensors]


def assert_same_aliasing(actual: Any, actual_args: Any, expected: Any, expected_args: Any) -> None:
    """Outputs share memory with the inputs and with each other exactly where eager's do."""
    got = _storages(_tensors(actual) + _tensors(actual_args))
    want = _storages(_tensors(expected) + _tensors(expected_args))
    outputs = len(_tensors(expected))
    for i, j in itertools.combinations(range(len(want)), 2):
        if i >= outputs:
            break
        kind = f"input {j - outputs}" if j >= outputs else f"output {j}"
        assert (got[i] == got[j]) == (want[i] == want[j]), (
            f"output {i} {'shares' if got[i] == got[j] else 'does not share'} memory with "
            f"{kind}; eager's {'does' if want[i] == want[j] else 'does not'}"
        )


def _backward(result: Any) -> None:
    outs = [t for t in _tensors(result) if t.requires_grad]
    assert outs, "no output requires grad"
    torch.stack([t.float().sum() for t in outs]).sum().backward()


def run_compared(
    target: Target,
    fn: Callable,
    make_args: Callable[[], tuple],
    *,
    grads: bool = False,
    aliasing: bool = False,
    calls: int = 2,
    **compile_kwargs: Any,
) -> None:
    """Compile ``fn`` once; on ``calls`` fresh argument sets compare it with eager.

    Outputs and (mutated) arguments always; gradients of the arguments with ``grads``;
    with ``aliasing``, which outputs share memory with inputs and with each other.
    """
    before = target.graphs
    compiled = target.compile(fn, **compile_kwargs)
    for call in range(calls):
        args = make_args()
        eager_args, kiln_args = copy.deepcopy(args), copy.deepcopy(args)
        expected = fn(*eager_args)
        actual = compiled(*kiln_args)
        assert_same(actual, expected, f"call {call}: output")
        assert_same(kiln_args, eager_args, f"call {call}: argument after the call")
        if aliasing:
            assert_same_aliasing(actual, kiln_args, expected, eager_args)
        if grads:
            _backward(expected)
            _backward(actual)
            assert_same(
                [t.grad for t in _tensors(kiln_args) if t.requires_grad and t.is_leaf],
                [t.grad for t in _tensors(eager_args) if t.requires_grad and t.is_leaf],
                f"call {call}: argument gradient",
            )
    assert target.graphs > before, (
        f"no graph reached backend {target.backend!r}: the function ran eagerly"
    )


def run_module_compared(
    target: Target,
    model: torch.nn.Module,
    make_batch: Callable[[], tuple],
    *,
    train: bool,
    steps: int = 2,
) -> None:
    """``model`` (in train mode or not) compiled and eager, over ``steps`` batches.

    Training: gradients of every parameter, then an SGD step on both twins, so the next
    batch runs on updated weights. Buffers (running statistics) are compared after each.
    """
    before = target.graphs
    eager_model, kiln_model = copy.deepcopy(model), copy.deepcopy(model)
    compiled = target.compile(kiln_model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager_model, kiln_model)]
    for step in range(steps):
        batch = make_batch()
        with torch.set_grad_enabled(train):
            expected = eager_model(*batch)
            actual = compiled(*batch)
        assert_same(actual, expected, f"step {step}: output")
        if train:
            _backward(expected)
            _backward(actual)
            assert_same(
                {n: p.grad for n, p in kiln_model.named_parameters()},
                {n: p.grad for n, p in eager_model.named_parameters()},
                f"step {step}: parameter gradient",
            )
            for opt in optimizers:
                opt.step()
                opt.zero_grad()
        assert_same(
            dict(kiln_model.named_buffers()),
            dict(eager_model.named_buffers()),
            f"step {step}: buffer",
        )
    assert target.graphs > before, (
        f"no graph reached backend {target.backend!r}: the model ran eagerly"
    )
