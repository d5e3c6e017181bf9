"""A few programs of the project's own: the harness's smoke test runs these."""

from __future__ import annotations

import torch

from benchmarks.capture_coverage.corpus import make_test, program

SOURCE = "torchkiln benchmarks/capture_coverage/corpus/basics.py"


@make_test
def add_mul(a, b):
    return (a + b) * b


@program(lambda: (torch.randn(4, 3),))
def mutate_input(x):
    x.add_(1)
    return x.sum(0)


@make_test
def list_of_tensors(a, b):
    out = [a, b]
    out.append(a - b)
    return out
