"""Each graph runs in OpenVINO or in torch, whichever ran it faster on its first call
(``choice.py``): the choice, torch's run of a graph laid out by OpenVINO, training
against eager whichever is kept, the option, the plan cache."""

from __future__ import annotations

import copy
import logging
import time

import pytest

pytest.importorskip("openvino", reason="openvino is not installed")

import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln import logs
from torchkiln.disk_cache import dumps, loads
from torchkiln_openvino import cache, choice
from torchkiln_openvino.choice import MeasuredChoice, TorchGraph, compile_partition
from torchkiln_openvino.runtime import OpenVINOGraph

aten = torch.ops.aten
F32 = {"rtol": 1e-4, "atol": 1e-4}


def graph_of(fn, *args) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*args)


def scaled(x):
    return (aten.mul.Tensor(x, 2),)


class Slow:
    """A stand-in for an OpenVINO graph that takes ``seconds`` longer than torch."""

    def __init__(self, fn, seconds: float):
        self.fn, self.seconds, self.calls = fn, seconds, 0

    def __call__(self, *args):
        self.calls += 1
        time.sleep(self.seconds)
        return list(self.fn(*args))


def test_the_faster_variant_is_kept_from_the_first_call_on(caplog):
    x = torch.randn(4, 3)
    slow = Slow(scaled, 0.005)
    measured = MeasuredChoice(slow, TorchGraph(graph_of(scaled, x)))
    before = torchkiln.counters["openvino_choice"]["torch"]
    logs.set_logs("autotune")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            torch.testing.assert_close(measured(x)[0], x * 2, rtol=0, atol=0)
    finally:
        logs.set_logs("")
    assert measured.chosen is measured.torch
    assert torchkiln.counters["openvino_choice"]["torch"] == before + 1
    assert "openvino or torch for a graph of 1 ops (mul.Tensor)" in caplog.text
    assert caplog.text.rstrip().endswith("-> torch")
    calls = slow.calls
    torch.testing.assert_close(measured(x + 1)[0], (x + 1) * 2, rtol=0, atol=0)
    assert slow.calls == calls  # torch alone from now on


def test_a_small_graph_stays_in_openvino_without_running_torch(monkeypatch):
    monkeypatch.setattr(choice, "SMALL_S", 1.0)  # small whatever the host's load
    x = torch.randn(4, 3)
    measured = compile_partition(graph_of(scaled, x), [x])
    assert isinstance(measured, MeasuredChoice)
    ran = []
    monkeypatch.setattr(TorchGraph, "call_boxed", lambda self, args: ran.append(1))
    torch.testing.assert_close(measured(x)[0], x * 2, rtol=0, atol=0)
    assert measured.chosen is measured.openvino and not ran


def test_the_option_off_compiles_openvino_alone():
    x = torch.randn(4, 3)
    assert isinstance(
        compile_partition(graph_of(scaled, x), [x], torch_when_faster=False), OpenVINOGraph
    )
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    compiled = torchkiln.compile(model, backend="openvino", options={"torch_when_faster": False})
    before = dict(torchkiln.counters["openvino_choice"])
    compiled(torch.randn(2, 8)).sum().backward()
    assert dict(torchkiln.counters["openvino_choice"]) == before


def transposed_layout(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values, laid out as its transpose (strides (1, rows))."""
    return t.t().contiguous().t()


def test_torch_takes_inputs_in_other_layouts_and_gives_the_traced_ones():
    """A backward's saved values come as an OpenVINO forward laid them out: its views take
    them (as reshapes), and its results come back in the strides it was traced for."""

    def fn(x):
        return (aten.view.default(x, [12]), aten.mul.Tensor(x, 2))

    x = torch.randn(4, 3)
    graph = TorchGraph(graph_of(fn, x))
    flat, doubled = graph(transposed_layout(x))
    torch.testing.assert_close(flat, x.reshape(12), rtol=0, atol=0)
    torch.testing.assert_close(doubled, x * 2, rtol=0, atol=0)
    assert doubled.stride() == (3, 1)


def test_a_graph_that_reads_strides_takes_its_inputs_as_traced():
    def fn(x):
        return (aten.as_strided.default(x, [2, 2], [3, 1]),)

    x = torch.randn(4, 3)
    (corner,) = TorchGraph(graph_of(fn, x))(transposed_layout(x))
    torch.testing.assert_close(corner, x[:2, :2], rtol=0, atol=0)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.attention = nn.MultiheadAttention(64, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))

    def forward(self, x):
        y = self.norm(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm(x))


MODELS = {"convnet": (ConvNet, (8, 3, 16, 16)), "block": (Block, (4, 16, 64))}


@pytest.mark.parametrize("kept", [("openvino", "torch"), ("torch", "openvino"), ("torch", "torch")])
@pytest.mark.parametrize("name", MODELS)
def test_training_matches_eager_whichever_variant_is_kept(monkeypatch, tmp_path, name, kept):
    """Forward and backward measured (the first step) and kept as forced, then a second
    step: losses, gradients and batch norms' running statistics match eager's."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))  # compiled here, not loaded
    monkeypatch.setattr(choice, "SMALL_S", 0.0)
    forced = list(kept)
    monkeypatch.setattr(choice, "faster", lambda times: forced.pop(0))
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino")
    for _ in range(2):
        x = torch.randn(shape)
        loss = compiled(x).square().mean()
        loss.backward()
        expected = twin(x).square().mean()
        expected.backward()
        torch.testing.assert_close(loss, expected, **F32)
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **F32)
            p.grad = q.grad = None
    assert not forced, "the forward and the backward were each measured once"
    for b, c in zip(model.buffers(), twin.buffers()):
        torch.testing.assert_close(b, c, **F32)


def stored(compiled):
    """``compiled`` through the plan cache's codec and pickling, as another process gets it."""
    return cache.load(loads(dumps(cache.dump(compiled))))


def test_the_plan_cache_keeps_the_choice():
    x = torch.randn(4, 3)
    gm = graph_of(scaled, x)
    measured = compile_partition(gm, [x])
    again = stored(measured)
    assert isinstance(again, MeasuredChoice) and again.chosen is None  # measured on loading
    measured.chosen = measured.torch
    torch_graph = stored(measured)
    assert isinstance(torch_graph, TorchGraph)
    torch.testing.assert_close(torch_graph(transposed_layout(x))[0], x * 2, rtol=0, atol=0)
    assert torch_graph(transposed_layout(x))[0].stride() == (3, 1)
    measured.chosen = measured.openvino
    assert isinstance(stored(measured), OpenVINOGraph)
