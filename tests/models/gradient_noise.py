"""Is a compiled model's training-gradient difference from eager noise, or an error?

A BatchNorm network in training mode on a tiny batch is ill-conditioned: float32 eager
itself can be 1% (of the largest gradient) away from float64, and two float32 programs
that only sum in different orders differ by as much. One comparison then can't tell a
compiler's rounding from a bug. This measures it: for several inputs perturbed by about
one float32 ulp, the largest gradient error of eager float32 and of the compiled model,
each against float64 eager (relative to the largest float64 gradient), and their medians.
A compiler that only rounds differently has the same median as eager; a wrong term shows
up as a median far above it.

    python tests/models/gradient_noise.py NAME [--backend inductor] [--samples 6]

NAME is a model of the suite (``benchmarks.models``) or ``timm:<architecture>`` for any
timm model (random weights, 10 classes, batch 2 of 64x64 images).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch

import torchkiln

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import MODELS, Built, random_inputs
from benchmarks.models.timm_models import import_timm


def build(name: str) -> Built:
    if not name.startswith("timm:"):
        return MODELS[name].build("tiny")
    torch.manual_seed(0)
    model = import_timm().create_model(
        name[5:], pretrained=False, num_classes=10, drop_rate=0.0, drop_path_rate=0.0
    )
    return Built(model, random_inputs((2, 3, 64, 64)), random_inputs((3, 3, 64, 64)))


def gradients(module: torch.nn.Module, call, inputs) -> dict[str, torch.Tensor]:
    module.zero_grad(set_to_none=True)
    call(*inputs).double().square().mean().backward()
    return {n: p.grad.double() for n, p in module.named_parameters() if p.grad is not None}


def largest_error(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    largest = max(t.abs().max().item() for t in reference.values())
    return max((grads[n] - reference[n]).abs().max().item() for n in reference) / largest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--samples", type=int, default=6)
    args = parser.parse_args()

    built = build(args.name)
    model = built.module.train()
    eager, compiled_model, exact = copy.deepcopy(model), copy.deepcopy(model), model.double()
    compiled = torchkiln.compile(compiled_model, backend=args.backend)
    eager_errors, compiled_errors = [], []
    for sample in range(args.samples):
        noise = torch.Generator().manual_seed(sample)
        inputs = tuple(
            t * (1 + 1e-7 * torch.randn(t.shape, generator=noise)) if t.is_floating_point() else t
            for t in built.inputs
        )
        reference = gradients(
            exact, exact, [t.double() if t.is_floating_point() else t for t in inputs]
        )
        eager_errors.append(largest_error(gradients(eager, eager, inputs), reference))
        compiled_errors.append(
            largest_error(gradients(compiled_model, compiled, inputs), reference)
        )
        print(
            f"sample {sample}: eager {eager_errors[-1]:.2e}  {args.backend} {compiled_errors[-1]:.2e}"
        )
    eager_median, compiled_median = (
        statistics.median(eager_errors),
        statistics.median(compiled_errors),
    )
    print(
        f"{args.name}: median error against float64 (of the largest gradient): "
        f"eager {eager_median:.2e}, {args.backend} {compiled_median:.2e} "
        f"({compiled_median / eager_median:.2f}x eager's)"
    )


if __name__ == "__main__":
    main()
