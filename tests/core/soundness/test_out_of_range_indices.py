"""An index tensor's value outside its dimension raises, as in eager, on backends whose
kernels read wherever an index points (``torchkiln.index_checks``): OpenVINO's Gather gave
zeros, TVM's take clamped, ONNX's Gather took ``embedding(-1)`` as the last row, and the
compiled graph answered where eager raises."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import torchkiln
from torchkiln.exc import IndexOutOfBounds

BACKENDS = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(package) is None, reason=f"{package} is not installed"
        ),
    )
    for name, package in [
        ("openvino", "openvino"),
        ("tvm", "tvm"),
        ("onnxrt", "onnxruntime"),
        ("inductor", "torch"),
    ]
]


def take(x, i):
    return x[i] * 2


def embed(w, i):
    return torch.nn.functional.embedding(i, w) + 1


def gather(x, i):
    return x.gather(0, i) * 3


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch, tmp_path):
    """Compiled here, not loaded: a stored graph keeps the checks it was built with."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))


#: name: (function, input, whether negative indices count from the end, eager's error)
CASES = {
    "x[i]": (take, lambda: torch.randn(5), True, IndexError),
    "embedding": (embed, lambda: torch.randn(5, 3), False, IndexError),
    "gather": (gather, lambda: torch.randn(5), False, RuntimeError),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_an_index_out_of_range_raises_as_in_eager(backend, case):
    fn, make, negative_ok, raised = CASES[case]
    torchkiln.reset()
    compiled = torchkiln.compile(fn, backend=backend)
    x = make()
    for good in ([4, 0], [4, -5] if negative_ok else [3, 1]):
        i = torch.tensor(good)
        torch.testing.assert_close(compiled(x, i), fn(x, i))
    for bad in ([0, 5], [0, -6], [0, -1] if not negative_ok else [40, 0]):
        i = torch.tensor(bad)
        with pytest.raises(raised):
            fn(x, i)
        with pytest.raises(raised):
            compiled(x, i)


def test_the_error_names_the_index_and_the_size():
    torchkiln.reset()
    compiled = torchkiln.compile(embed, backend="aot_eager")  # eager's own error
    with pytest.raises(IndexError):
        compiled(torch.randn(5, 3), torch.tensor([7]))
    pytest.importorskip("openvino")
    torchkiln.reset()
    compiled = torchkiln.compile(embed, backend="openvino")
    with pytest.raises(
        IndexOutOfBounds, match="index 7 is out of bounds for a dimension of size 5"
    ):
        compiled(torch.randn(5, 3), torch.tensor([7, 1]))
