"""Calls made for what they do, not for a value, run as in eager (``torchkiln.effects``).

Capture had turned every call that returns nothing into a constant: a custom op that writes
its argument left it unwritten, ``torch._assert_async`` never raised, ``aten._print`` never
printed. The AOT layer's dead-code removal and its partitioner dropped such calls too.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.disk_cache import dumps, loads

BACKENDS = ["eager", "aot_eager", "inductor"]


@torch.library.custom_op("kiln_effects::add_into", mutates_args=("out",))
def add_into(x: torch.Tensor, out: torch.Tensor) -> None:
    out.add_(x)


@add_into.register_fake
def _(x, out):
    return None


def adds_into(x, out):
    before = out * 1
    add_into(x * 3, out)
    return x * 2, before, out * 2  # reads of ``out`` before and after the write


@pytest.mark.parametrize("backend", [*BACKENDS, "onnxrt", "openvino"])
def test_a_custom_op_that_writes_its_argument_writes_it(backend):
    pytest.importorskip({"onnxrt": "onnxruntime"}.get(backend, "torch"))
    pytest.importorskip({"openvino": "openvino"}.get(backend, "torch"))
    torchkiln.reset()
    compiled = torchkiln.compile(adds_into, backend=backend, fullgraph=True)
    for _ in range(2):
        x, out = torch.randn(4), torch.randn(4)
        original = out.clone()
        doubled, before, after = compiled(x, out)
        torch.testing.assert_close(out, original + x * 3)
        torch.testing.assert_close([doubled, before, after], [x * 2, original, out * 2])


def checks_positive(x):
    torch._assert_async((x > 0).all())
    torch.ops.aten._assert_async(x.sum() > 0)
    return x + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_async_assertions_raise_as_in_eager(backend, grad):
    torchkiln.reset()
    compiled = torchkiln.compile(checks_positive, backend=backend, fullgraph=True)
    x = torch.rand(4).add(0.5).requires_grad_(grad)
    torch.testing.assert_close(compiled(x), x + 1)
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value"):
        checks_positive(-x)  # what eager raises
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value"):
        compiled(-x)


def prints(x):
    torch.ops.aten._print("kiln says hello")
    return x * 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_aten_print_prints_each_call(backend, grad, capfd):
    torchkiln.reset()
    compiled = torchkiln.compile(prints, backend=backend, fullgraph=True)
    x = torch.randn(3, requires_grad=grad)
    capfd.readouterr()
    for _ in range(2):
        out = compiled(x)
        if grad:
            out.sum().backward()
    assert capfd.readouterr().out.count("kiln says hello") == 2


def test_op_packets_survive_the_disk_caches_pickling():
    """A captured ``torch.ops.aten.add(x, 1)`` targets the packet: storing such a capture
    raised from pybind11 (compiling failed) instead of keeping or skipping it."""
    packet, overload = torch.ops.aten.add, torch.ops.aten.add.Tensor
    assert loads(dumps([packet, overload])) == [packet, overload]


def test_a_captured_op_packet_compiles_with_captures_kept_on_disk(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torchkiln.config, "persist_captures", True)
    torchkiln.reset()
    x = torch.randn(3)
    torch.testing.assert_close(torchkiln.compile(_adds_one, backend="eager")(x), x + 1)


def _adds_one(x):
    return torch.ops.aten.add(x, 1)
