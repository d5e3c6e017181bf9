"""Test helpers shared by every test area: a recording backend and eager-vs-compiled checks.

Import as ``from kiln_testing import RecordingBackend, run_both`` (pytest puts
``tests/`` on ``sys.path``, see pyproject.toml).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torchkiln


class RecordingBackend:
    """A backend that records every graph it is given and runs it unchanged.

    Tests use it to count graphs (``graph_count``) and inspect what was
    captured (``graphs``, ``example_inputs``, ``op_counts``).
    """

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list[Any]] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def op_counts(self) -> list[int]:
        """Number of call_function/call_method/call_module nodes in each graph."""
        return [
            sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes)
            for gm in self.graphs
        ]


def assert_same(actual: Any, expected: Any) -> None:
    """Structure, types and values equal; tensors compared with assert_close."""
    assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
        assert actual.requires_grad == expected.requires_grad
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
        if hasattr(expected, "_fields"):
            assert actual._fields == expected._fields
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    else:
        assert actual == expected


def run_both(fn: Callable, *args: Any, backend: Callable, **compile_kwargs: Any) -> tuple[Any, Any]:
    """Run ``fn`` eagerly and compiled on deep copies of ``args``; return both results.

    Returns ``(compiled_result, eager_result)`` after asserting they match,
    and that the arguments were mutated identically (side effects).
    """
    eager_args = copy.deepcopy(args)
    compiled_args = copy.deepcopy(args)
    expected = fn(*eager_args)
    actual = torchkiln.compile(fn, backend=backend, **compile_kwargs)(*compiled_args)
    assert_same(actual, expected)
    assert_same(list(compiled_args), list(eager_args))
    return actual, expected
