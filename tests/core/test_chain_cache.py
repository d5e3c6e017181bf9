"""Backend chains in the on-disk plan cache: a fresh compile loads its partitions, converting
nothing, and gets eager's results and gradients."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import torch
import torch.fx as fx

import torchkiln
from torchkiln import logs, registry
from torchkiln.aot import ArtifactCodec
from torchkiln.plugin import Backend, Capabilities, Option

aten = torch.ops.aten
ADD_MUL = frozenset({aten.add.Tensor, aten.mul.Tensor})


class ToyGraph:
    """What the toy backends compile a partition to: its graph, run as it is."""

    def __init__(self, gm: fx.GraphModule):
        self.gm = gm

    def __call__(self, *args):
        return self.gm(*args)


@pytest.fixture
def toy(monkeypatch, tmp_path) -> Counter:
    """Registers ``toy`` (add and mul, stored in the plan cache; option ``refuse_mul`` makes
    its partitions with a mul fail to compile), ``toy_nocodec`` (no codec) and
    ``toy_unstorable`` (a codec that stores nothing); counts conversions and loads."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    torchkiln.reset()
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    made: Counter = Counter()

    def compile_partition(gm, example_inputs, refuse_mul=False):
        if refuse_mul and gm.graph.find_nodes(op="call_function", target=aten.mul.Tensor):
            raise RuntimeError("no mul kernel")
        made["converted"] += 1
        return ToyGraph(gm)

    def load(gm):
        made["loaded"] += 1
        return ToyGraph(gm)

    def dump(compiled):
        return compiled.gm if isinstance(compiled, ToyGraph) else None

    option = Option("refuse_mul", False, "partitions with a mul fail to compile", type=bool)
    for name, codec in (
        ("toy", ArtifactCodec("toy v1", dump=dump, load=load)),
        ("toy_nocodec", None),
        ("toy_unstorable", ArtifactCodec("toy v1", dump=lambda compiled: None, load=load)),
    ):
        caps = Capabilities(compile_partition=compile_partition, ops=ADD_MUL, codec=codec)
        torchkiln.register_backend(Backend(name, capabilities=caps, options=(option,)))
    return made


def mlp(x, w):
    y = x * 2 + x
    z = y @ w  # not a toy op: the graph is split
    return (z * z + 1) @ w.t() * 3


def fresh_process_compile(backend, options=None):
    """What a new process does: nothing in memory, the same cache folder."""
    torchkiln.reset()
    return torchkiln.compile(mlp, backend=backend, options=options)


def check_training(compiled) -> None:
    args = [torch.randn(4, 4, requires_grad=True) for _ in range(2)]
    twins = [a.detach().clone().requires_grad_() for a in args]
    out, expected = compiled(*args), mlp(*twins)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for a, b in zip(args, twins):
        torch.testing.assert_close(a.grad, b.grad)


def check_inference(compiled) -> None:
    args = [torch.randn(4, 4) for _ in range(2)]
    torch.testing.assert_close(compiled(*args), mlp(*args))


# eager's partitions are stored as they are; aot_eager's are compiled again at load
@pytest.mark.parametrize("backend", ["toy", ["toy", "aot_eager"]], ids=["eager", "aot_eager"])
@pytest.mark.parametrize("check", [check_training, check_inference])
def test_second_compile_loads_every_partition_without_converting(toy, check, backend):
    check(fresh_process_compile(backend))
    converted = toy["converted"]
    assert converted >= 2 and torchkiln.counters["aot_cache"]["stores"] == 1

    compiled = fresh_process_compile(backend)
    check(compiled)
    assert toy["converted"] == converted  # nothing converted again
    assert toy["loaded"] == converted
    assert torchkiln.counters["aot_cache"]["hits"] == 1


def test_partition_that_failed_to_compile_is_stored_with_the_next_backend(toy, caplog):
    """...and a process that loads it warns as the one that compiled it did."""
    options = {"toy": {"refuse_mul": True}}

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        check_training(fresh_process_compile(["toy", "eager"], options))
        compiled_warnings = warnings()
        caplog.clear()
        converted = toy["converted"]
        check_training(fresh_process_compile(["toy", "eager"], options))
    assert torchkiln.counters["aot_cache"]["hits"] == 1
    assert toy["converted"] == converted
    assert compiled_warnings and all("failed to compile" in w for w in compiled_warnings)
    assert sorted(warnings()) == sorted(
        f"{w} (a graph from the plan cache)" for w in compiled_warnings
    )


def test_other_options_miss(toy):
    refusing, plain = {"toy": {"refuse_mul": True}}, {"toy": {"refuse_mul": False}}
    check_inference(fresh_process_compile(["toy", "eager"], refusing))
    converted = toy["converted"]
    check_inference(fresh_process_compile(["toy", "eager"], plain))
    assert torchkiln.counters["aot_cache"]["hits"] == 0
    assert toy["converted"] > converted
    converted = toy["converted"]
    check_inference(fresh_process_compile(["toy", "eager"], refusing))
    assert torchkiln.counters["aot_cache"]["hits"] == 1
    assert toy["converted"] == converted


def test_backend_without_codec_gets_no_plan_cache(toy, tmp_path, caplog):
    logs.set_logs("aot_cache")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            check_inference(fresh_process_compile("toy_nocodec"))
    finally:
        logs.set_logs("")
    assert "backend 'toy_nocodec' declares no Capabilities.codec" in caplog.text
    assert not list(tmp_path.rglob("*.pkl"))


def test_partition_that_cannot_be_stored_makes_the_graph_uncacheable(toy, tmp_path, caplog):
    logs.set_logs("aot_cache")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            check_inference(fresh_process_compile("toy_unstorable"))
    finally:
        logs.set_logs("")
    assert torchkiln.counters["aot_cache"]["uncacheable"] == 1
    assert "backend 'toy_unstorable' can't store partition_0" in caplog.text
    assert not list(tmp_path.rglob("*.pkl"))


def test_a_loaded_graph_logs_its_partition_plan_again(toy, caplog):
    check_inference(fresh_process_compile("toy"))
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            check_inference(fresh_process_compile("toy"))
    finally:
        logs.set_logs("")
    assert torchkiln.counters["aot_cache"]["hits"] == 1
    assert "(from the plan cache)\ninference graph: 5 partitions (toy: 3, eager: 2)" in caplog.text
