"""``bool(obj)`` in a branch: Python's answer (``__bool__``, ``__len__``, else true), never
a guess. An object whose truth capture can't compute breaks the graph instead."""

from __future__ import annotations

import array

import pytest
import torch
from torch.testing import assert_close

import torchkiln
from kiln_testing import RecordingBackend


def branch(flag, x):
    if flag:
        return x + 1
    return x - 1


class Sized:
    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n


class Flag:
    def __init__(self, on: bool):
        self.on = on

    def __bool__(self) -> bool:
        return self.on


class Plain:
    pass


def check(flag, expected_graphs: int | None, *, fullgraph: bool = False) -> None:
    torchkiln.reset()
    x = torch.randn(3)
    backend = RecordingBackend()
    compiled = torchkiln.compile(branch, backend=backend, fullgraph=fullgraph)
    assert_close(compiled(flag, x), branch(flag, x))
    if expected_graphs is not None:
        assert len(backend.graphs) == expected_graphs


def test_user_len_and_bool_are_run_in_the_graph():
    for flag in (Sized(0), Sized(2), Flag(False), Flag(True), Plain()):
        check(flag, 1, fullgraph=True)


def test_an_opaque_object_with_a_length_breaks_the_graph_instead_of_guessing():
    check(array.array("f"), None)  # empty: false
    check(array.array("f", [1.0]), None)
    with pytest.raises(torchkiln.exc.Unsupported, match="bool"):
        check(array.array("f"), None, fullgraph=True)


def test_module_containers_are_true_when_they_have_children():
    check(torch.nn.ModuleList(), 1, fullgraph=True)
    check(torch.nn.ModuleList([torch.nn.ReLU()]), 1, fullgraph=True)
    check(torch.nn.Sequential(), 1, fullgraph=True)


def test_a_container_emptied_between_calls_recompiles():
    torchkiln.reset()
    layers = torch.nn.ModuleList([torch.nn.ReLU()])
    x = torch.randn(3)
    compiled = torchkiln.compile(branch, backend="eager")
    assert_close(compiled(layers, x), x + 1)
    del layers[0]
    assert_close(compiled(layers, x), x - 1)
