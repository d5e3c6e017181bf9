"""Inputs whose layout dynamic shapes can't describe run in eager, and the call returns.

With a dimension made dynamic (the second size of automatic dynamic shapes), an input
whose strides don't follow from its sizes (``big[:, ::2]``), or two views of one
column-major buffer the graph writes through, can't be captured: the frame then runs in
eager. Building that eager entry's guards raised ``Unsupported`` ("a shape guard reads sN,
which no graph input's size gives") out of the user's call. Found by the guard fuzz's
layout mutations.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln

BACKENDS = ["eager", "aot_eager", "inductor"]


def double(x):
    return x * 2


def scale_add(a, b):
    a.mul_(2)
    return a + b


def every_other_column(rows: int) -> torch.Tensor:
    return torch.randn(rows, 6)[:, ::2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gapped_strided_input_at_a_second_size_runs(backend):
    torchkiln.reset()
    compiled = torchkiln.compile(double, backend=backend)
    for rows in (2, 4, 5):  # the second size recompiles with the rows dynamic
        x = every_other_column(rows)
        torch.testing.assert_close(compiled(x), double(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_views_of_a_column_major_buffer_written_at_a_third_size_run(backend):
    torchkiln.reset()
    compiled = torchkiln.compile(scale_add, backend=backend)
    for rows in (2, 4):
        a = torch.randn(rows, 3)
        expected_a = a.clone()
        torch.testing.assert_close(compiled(a, a), scale_add(expected_a, expected_a))
        torch.testing.assert_close(a, expected_a)
    base = torch.randn(3, 4)
    expected_base = base.clone()
    a, expected_a = base.t(), expected_base.t()
    torch.testing.assert_close(compiled(a, a[:]), scale_add(expected_a, expected_a[:]))
    torch.testing.assert_close(base, expected_base)
