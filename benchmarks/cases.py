"""The two cases every model runs: inference (no_grad) and training (forward, backward, optimizer step).

A case turns a module and its (possibly compiled) forward into a ``step``
closure, and says what to compare with eager after the first step: the
outputs for inference; the loss and every parameter's gradient for training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

CASES = ("inference", "training")


@dataclass
class Workload:
    """``step()`` runs one step; ``results(first_output)`` is what eager is compared on."""

    step: Callable[[], Any]
    results: Callable[[Any], dict[str, torch.Tensor]]


def loss_of(output: Any) -> torch.Tensor:
    """A scalar every output has a useful gradient through (a plain mean of a softmax has none)."""
    first = next(t for t in tree_leaves(output) if isinstance(t, torch.Tensor))
    return first.float().square().mean()


class LateForward:
    """A workload's forward, given after the workload is made (``forward.fn = compiled``).

    A training loop makes its optimizer before its first step, and the first optimizer of a
    process imports TorchDynamo (seconds: ``torch.optim`` uses its decorators); a cold
    first step timed from the compile call must not pay it for one compiler
    (``torchkiln``'s first capture) and not for the other (``torch.compile``, whose compile
    call imports TorchDynamo too). So the workload is made first, then the compile is timed.
    """

    def __init__(self) -> None:
        self.fn: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def make_workload(
    module: torch.nn.Module,
    forward: Callable,
    inputs: tuple[torch.Tensor, ...],
    case: str,
    mark_cuda_graph_steps: bool = False,
) -> Workload:
    """The step of ``case`` calling ``forward(*inputs)``; ``module`` holds the parameters."""
    mark = torch.compiler.cudagraph_mark_step_begin if mark_cuda_graph_steps else (lambda: None)
    if case == "inference":
        module.eval()

        def infer() -> Any:
            mark()
            with torch.no_grad():
                return forward(*inputs)

        return Workload(infer, _output_results)
    if case == "training":
        module.train()
        params = dict(module.named_parameters())
        optimizer = torch.optim.AdamW(params.values(), lr=1e-3)

        def train() -> torch.Tensor:
            mark()
            optimizer.zero_grad(set_to_none=True)
            loss = loss_of(forward(*inputs))
            loss.backward()
            optimizer.step()
            return loss.detach()

        def results(loss: torch.Tensor) -> dict[str, torch.Tensor]:
            grads = {f"grad:{n}": p.grad for n, p in params.items() if p.grad is not None}
            return _to_cpu({"loss": loss, **grads})

        return Workload(train, results)
    raise ValueError(f"unknown case {case!r}; cases: {', '.join(CASES)}")


def _output_results(output: Any) -> dict[str, torch.Tensor]:
    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]
    return _to_cpu({f"output{i}": t for i, t in enumerate(leaves)})


def _to_cpu(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: t.detach().to("cpu", torch.float32, copy=True) for k, t in tensors.items()}


def max_abs_diff(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference over every compared tensor; raises when they don't line up."""
    if expected.keys() != actual.keys():
        missing = sorted(expected.keys() - actual.keys())[:3]
        extra = sorted(actual.keys() - expected.keys())[:3]
        raise ValueError(f"results differ from eager's: missing {missing}, unexpected {extra}")
    worst = 0.0
    for key, want in expected.items():
        got = actual[key]
        if got.shape != want.shape:
            raise ValueError(f"{key}: shape {tuple(got.shape)} != eager's {tuple(want.shape)}")
        if want.numel():
            worst = max(worst, (got - want).abs().max().item())
    return worst
