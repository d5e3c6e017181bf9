"""Inputs that start inside their storage, and ops that address a storage.

A graph input may be a view starting anywhere in its storage (``base[5:]``; every
graph-break resume function passes such views on). Three ways this gave wrong answers:
an output that views an input (``x.diagonal().add_(1)`` returns the diagonal) was rebuilt
at the offset tracing saw, not from where the call's input starts; ``x.as_strided(...,
offset)``, whose offset counts from the storage's start, was compiled as if it counted
from the input's; and ``as_strided`` of a slice or a transpose read a backend's own
dense copy of it instead of the storage. The tvm backend refused inputs that do not start
on a 64-byte boundary.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

import torchkiln

BACKENDS = [
    "aot_eager",
    "inductor",
    pytest.param(
        "openvino",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("openvino") is None, reason="needs openvino"
        ),
    ),
    pytest.param(
        "tvm",
        marks=pytest.mark.skipif(importlib.util.find_spec("tvm") is None, reason="needs tvm"),
    ),
]

#: each reads (or writes) a view of a 3x4 input that starts at some offset of a 20-element storage
CASES = {
    "diagonal_written": lambda x: x.diagonal().add_(1),
    "unfold_written": lambda x: x.unfold(1, 2, 2).mul_(2),
    "diagonal": lambda x: x.diagonal() * 2,
    "as_strided_offset": lambda x: x.as_strided((2, 2), (1, 2), 1) * 2,
    "as_strided_offset_of_slice": lambda x: x[1:].as_strided((2, 2), (1, 2), 3) * 2,
    "as_strided_offset_of_transpose": lambda x: x.t().as_strided((2, 2), (1, 2), 1) * 2,
    "as_strided_offset_of_computed_slice": lambda x: (x + 1)[1:].as_strided((2, 2), (1, 2), 3),
    "as_strided_own_offset": lambda x: x.as_strided((2, 2), (1, 2)) * 2,
}


def view_at(storage: torch.Tensor, offset: int) -> torch.Tensor:
    return storage[offset : offset + 12].view(3, 4)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_at_any_storage_offset_match_eager(backend, case):
    fn = CASES[case]
    torchkiln.reset()
    compiled = torchkiln.compile(fn, backend=backend)
    for offset in (5, 0, 3, 5):  # the first call's offset, others, and back
        storage = torch.randn(20)
        expected_storage = storage.clone()
        expected = fn(view_at(expected_storage, offset))
        got = compiled(view_at(storage, offset))
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(storage, expected_storage)  # writes land where eager's do
        if case.endswith("_written"):  # eager returns a view of the input: so must we
            assert got.untyped_storage()._cdata == storage.untyped_storage()._cdata
            assert got.storage_offset() == expected.storage_offset()


@pytest.mark.parametrize(
    "case", ["diagonal", "as_strided_offset", "as_strided_offset_of_computed_slice"]
)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gradients_through_inputs_at_any_storage_offset(backend, case):
    fn = CASES[case]
    torchkiln.reset()
    compiled = torchkiln.compile(lambda x: (fn(x) ** 2).sum(), backend=backend)
    for offset in (5, 0, 3):
        weight = torch.randn(20, requires_grad=True)
        expected_weight = weight.detach().clone().requires_grad_()
        (fn(view_at(expected_weight, offset)) ** 2).sum().backward()
        compiled(view_at(weight, offset)).backward()
        torch.testing.assert_close(weight.grad, expected_weight.grad)


def test_as_strided_at_an_offset_passes_the_whole_storage():
    """The input read at an explicit offset reaches backends as its storage from offset 0
    (one placeholder of all 20 elements); the graph rebuilds the input at the offset it
    was captured with, so another offset compiles anew and the same one reuses it."""
    seen = []

    def backend(gm, example_inputs):
        seen.append([tuple(t.shape) for t in example_inputs])
        return gm.forward

    torchkiln.reset()
    fn = CASES["as_strided_offset"]
    compiled = torchkiln.compile(fn, backend=backend)
    storage = torch.randn(20)
    for offset in (5, 0, 5, 0):
        torch.testing.assert_close(compiled(view_at(storage, offset)), fn(view_at(storage, offset)))
    assert seen == [[(20,)], [(20,)]]


def test_as_strided_at_an_offset_of_an_input_that_requires_grad_runs_in_eager():
    torchkiln.reset()
    fn = CASES["as_strided_offset"]
    compiled = torchkiln.compile(fn, backend="aot_eager", fullgraph=True)
    weight = torch.randn(20, requires_grad=True)
    with pytest.raises(torchkiln.exc.Unsupported, match="as_strided at a storage offset"):
        compiled(view_at(weight, 5))
