"""Test helpers shared by every test area: a recording backend and eager-vs-compiled checks.

Import as ``from kiln_testing import RecordingBackend, run_both`` (pytest puts
``tests/`` on ``sys.path``, see pyproject.toml).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import inspect
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.fx as fx

import torchkiln


class ScaleRegistry(dict):
    """A dict subclass whose method reaches a C method through ``super()``, as transformers'
    registries do: the pattern behind several of the HF models' lookups."""

    def get(self, key):
        return super().get(str(key)) or 1.0


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
    """Structure, types and values equal; tensors compared with assert_close.

    Plain objects (no ``__eq__`` of their own) and dataclass instances are compared by
    their attributes (a dict subclass's items too), numpy arrays by value.
    """
    assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        assert_same(vars(actual), vars(expected))
        if isinstance(expected, dict):
            assert_same(dict(actual), dict(expected))
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
        assert actual.requires_grad == expected.requires_grad
    elif isinstance(expected, (list, tuple, collections.deque)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
        if isinstance(expected, collections.deque):
            assert actual.maxlen == expected.maxlen
        if hasattr(expected, "_fields"):
            assert actual._fields == expected._fields
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(actual[key], expected[key])
    elif isinstance(expected, np.ndarray):
        np.testing.assert_allclose(actual, expected)
    elif type(expected).__eq__ is object.__eq__ and hasattr(expected, "__dict__"):
        assert_same(vars(actual), vars(expected))
    else:
        assert actual == expected, f"{actual!r} != {expected!r}"


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


def graph_break_count() -> int:
    """Graph breaks recorded since the last ``torchkiln.reset()`` (all reasons)."""
    return sum(torchkiln.counters["graph_break"].values())


def _matches(got: int, expected: int | tuple[int, ...]) -> bool:
    """``expected`` is a count, or a tuple of counts that are all acceptable."""
    return got in expected if isinstance(expected, tuple) else got == expected


def _graph_listing(backend: RecordingBackend) -> str:
    return "\n".join(f"--- graph {i} ---\n{gm.code}" for i, gm in enumerate(backend.graphs))


def assert_graph_count(
    backend: RecordingBackend, expected: int | tuple[int, ...], when: str = ""
) -> None:
    """``backend`` compiled exactly ``expected`` graphs; the message lists what it got."""
    got = backend.graph_count
    assert _matches(got, expected), (
        f"expected {expected} graph(s){' ' + when if when else ''}, the backend compiled {got}:\n"
        f"{_graph_listing(backend)}"
    )


def _tensor_leaves(value: Any) -> list[torch.Tensor]:
    leaves, _ = torch.utils._pytree.tree_flatten(value)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def assert_same_grads(compiled_args: Any, eager_args: Any) -> None:
    """Every leaf tensor argument that requires grad got the same ``.grad``."""
    for i, (a, e) in enumerate(
        zip(_tensor_leaves(compiled_args), _tensor_leaves(eager_args), strict=True)
    ):
        if e.requires_grad and e.is_leaf:
            assert (a.grad is None) == (e.grad is None), (
                f"argument tensor {i}: grad presence differs"
            )
            if e.grad is not None:
                torch.testing.assert_close(a.grad, e.grad, msg=f"gradient of argument tensor {i}")


def _backward_on_outputs(result: Any) -> None:
    outs = [t for t in _tensor_leaves(result) if t.requires_grad]
    assert outs, "grads=True but no output requires grad"
    torch.stack([t.float().sum() for t in outs]).sum().backward()


def check_compiled(
    fn: Callable,
    make_args: Callable[[], tuple],
    *,
    backend: RecordingBackend,
    graphs: int | tuple[int, ...],
    breaks: int | tuple[int, ...] = 0,
    calls: int = 2,
    grads: bool = False,
    capsys: Any = None,
    **compile_kwargs: Any,
) -> Callable:
    """Compile ``fn`` once and compare it with eager on ``calls`` fresh argument sets.

    ``make_args()`` returns a new tuple of (random) arguments each time; eager
    and compiled each get a deep copy, so argument mutations are compared too.
    The first call must compile exactly ``graphs`` graphs with ``breaks`` graph
    breaks; later calls (same kinds of inputs) must compile nothing. With
    ``grads`` the outputs are back-propagated and argument gradients compared;
    with ``capsys`` the printed output of each call is compared. Returns the
    compiled function.
    """
    compiled = torchkiln.compile(fn, backend=backend, **compile_kwargs)
    for call in range(calls):
        args = make_args()
        eager_args, compiled_args = copy.deepcopy(args), copy.deepcopy(args)
        if capsys is not None:
            capsys.readouterr()
        expected = fn(*eager_args)
        eager_out = capsys.readouterr().out if capsys is not None else None
        actual = compiled(*compiled_args)
        if capsys is not None:
            compiled_out = capsys.readouterr().out
            assert compiled_out == eager_out, (
                f"call {call}: printed output differs\ncompiled:\n{compiled_out}\neager:\n{eager_out}"
            )
        assert_same(actual, expected)
        assert_same(list(compiled_args), list(eager_args))
        if grads:
            _backward_on_outputs(expected)
            _backward_on_outputs(actual)
            assert_same_grads(compiled_args, eager_args)
        when = "on the first call" if call == 0 else f"after call {call} (same kinds of inputs)"
        assert_graph_count(backend, graphs, when)
        assert _matches(graph_break_count(), breaks), (
            f"expected {breaks} graph break(s) {when}, counters say "
            f"{dict(torchkiln.counters['graph_break'])}"
        )
    return compiled


def source_location(fn: Callable, marker: str) -> tuple[str, int]:
    """``(file, line)`` of the first source line of ``fn`` containing ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    for offset, text in enumerate(lines):
        if marker in text:
            return inspect.getsourcefile(fn), start + offset
    raise AssertionError(f"{marker!r} not found in the source of {fn.__name__}")


def assert_location(location: str | None, fn: Callable, marker: str) -> None:
    """``location`` ("file:line") names the line of ``fn`` that contains ``marker``."""
    file, line = source_location(fn, marker)
    assert location, f"no location given; expected {file}:{line}"
    got_file, _, got_line = location.rpartition(":")
    assert os.path.basename(got_file) == os.path.basename(file) and got_line == str(line), (
        f"location {location!r} should be {os.path.basename(file)}:{line} ({marker!r})"
    )


@contextlib.contextmanager
def kiln_logs(spec: str) -> Iterator[None]:
    """Turn ``TORCHKILN_LOGS`` artifacts on for the ``with`` block, then off again."""
    from torchkiln import logs

    logs.set_logs(spec)
    try:
        yield
    finally:
        logs.set_logs("")


class _InlineTracer(fx.Tracer):
    """Traces through every submodule, so parameters and buffers appear as ``get_attr`` nodes."""

    proxy_buffer_attributes = True

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return False


def flat_graph(module: torch.nn.Module) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """``module`` as a graph whose leading placeholders are its parameters and buffers.

    Returns the graph and those tensors (the module's own objects, so an
    optimizer on ``module.parameters()`` updates what the graph reads).
    This is the shape of graph the capture core hands to backends.
    """
    for sub in module.modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
            sub._check_input_dim = lambda x: None  # data-dependent check symbolic_trace can't run
    graph = _InlineTracer().trace(module)
    state = dict(module.named_parameters()) | dict(module.named_buffers())
    first = next(n for n in graph.nodes if n.op == "placeholder")
    with graph.inserting_before(first):
        placeholders = {name: graph.placeholder("p_" + name.replace(".", "_")) for name in state}
    for node in list(graph.nodes):
        if node.op == "get_attr" and node.target in placeholders:
            node.replace_all_uses_with(placeholders[node.target])
            graph.erase_node(node)
    return fx.GraphModule(module, graph), list(state.values())


def pip_install_into(target: Path, source: Path | str) -> None:
    """``pip install`` a wheel or a source folder into ``target`` only (no deps, no network)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
