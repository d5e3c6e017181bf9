"""Capability partitioning and backend chains: graphs split among backends, matching eager."""

from __future__ import annotations

import itertools
import logging
import operator
import random

import pytest
import torch
import torch.fx as fx

import torchkiln
from torchkiln import config, logs, registry
from torchkiln.api import resolve_backend
from torchkiln.exc import (
    BackendCompilerFailed,
    InvalidBackendChain,
    InvalidOptionError,
    UnknownBackendError,
)
from torchkiln.partition import compute_nodes, group, split
from torchkiln.plugin import Backend, Capabilities

aten = torch.ops.aten
ADD_MUL = frozenset({aten.add.Tensor, aten.mul.Tensor})


@pytest.fixture
def toy(monkeypatch):
    """Registers ``toy`` (add and mul only), ``flaky`` (raises on partitions of 2+ ops) and
    ``broken`` (runs everything, compiles nothing); returns the graphs ``toy`` compiled."""
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    compiled: list[fx.GraphModule] = []

    def compile_partition(gm, example_inputs):
        compiled.append(gm)
        return gm.forward

    def flaky_partition(gm, example_inputs):
        if len(compute_nodes(gm.graph)) > 1:
            raise RuntimeError("no kernel for this partition")
        return gm.forward

    def broken(gm, example_inputs):
        raise RuntimeError("broken backend")

    caps = Capabilities(compile_partition=compile_partition, ops=ADD_MUL)
    torchkiln.register_backend(Backend("toy", capabilities=caps))
    flaky = Capabilities(compile_partition=flaky_partition, ops=ADD_MUL)
    torchkiln.register_backend(Backend("flaky", capabilities=lambda: flaky))
    torchkiln.register_backend(Backend("broken", broken))
    return compiled


def mlp(x, w):
    y = x * 2 + x
    z = y @ w
    return (z * z + 1) @ w.t() * 3


def run_with_grads(fn, *args):
    out = fn(*args)
    out.sum().backward()
    grads = [a.grad for a in args]
    for a in args:
        a.grad = None
    return out, grads


def fresh_inputs():
    return [torch.randn(4, 4, requires_grad=True) for _ in range(2)]


def test_toy_backend_gets_the_add_mul_partitions_and_matches_eager(toy, caplog):
    compiled_fn = torchkiln.compile(mlp, backend="toy")
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            run_with_grads(compiled_fn, *fresh_inputs())
    finally:
        logs.set_logs("")
    for _ in range(2):
        inputs = fresh_inputs()
        actual = run_with_grads(compiled_fn, *inputs)
        torch.testing.assert_close(actual, run_with_grads(mlp, *inputs))
    ops = [{n.target for n in compute_nodes(gm.graph)} for gm in toy]
    assert all(o <= ADD_MUL for o in ops)
    # forward: (x*2 + x) | mm | (z*z + 1) | permute, mm | *3
    assert ops[:3] == [ADD_MUL, ADD_MUL, {aten.mul.Tensor}]
    assert "forward graph: 5 partitions (toy: 3, eager: 2)" in caplog.text
    assert "mm.default: toy: not among its ops" in caplog.text
    assert "backward graph:" in caplog.text


def test_partitions_smaller_than_the_minimum_go_to_the_next_backend(toy, monkeypatch):
    monkeypatch.setattr(config, "partition_min_ops", 2)
    chain = resolve_backend("toy", None, None).compile_fn
    gm = fx.symbolic_trace(lambda x, w: torch.mm(x * 2 + x, w) * 3)
    for node in gm.graph.nodes:  # the aten overloads the AOT layer would give
        node.target = {operator.mul: aten.mul.Tensor, operator.add: aten.add.Tensor}.get(
            node.target, node.target
        )
    plan = chain.plan(gm)
    assert [(chain.links[p.label].name, p.op_count) for p in plan.partitions] == [
        ("toy", 2),
        ("eager", 2),
    ]
    assert "fewer than config.partition_min_ops=2" in str(plan)


def test_a_partition_that_fails_to_compile_runs_with_the_next_backend(toy, caplog):
    compiled_fn = torchkiln.compile(mlp, backend=["flaky", "eager"])
    inputs = fresh_inputs()
    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        actual = run_with_grads(compiled_fn, *inputs)
    torch.testing.assert_close(actual, run_with_grads(mlp, *inputs))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings, "no warning for the partitions flaky failed on"
    assert all("backend 'flaky' failed to compile partition_" in w for w in warnings)
    assert "running it with 'eager' instead (ops: mul.Tensor, add.Tensor)" in warnings[0]
    assert len(warnings) == len(set(warnings))  # one per failed partition


def test_the_last_backend_failing_keeps_suppress_errors_semantics(toy, monkeypatch):
    with pytest.raises(BackendCompilerFailed, match="broken backend"):
        torchkiln.compile(mlp, backend=["toy", "broken"])(*fresh_inputs())
    monkeypatch.setattr(config, "suppress_errors", True)
    inputs = fresh_inputs()
    actual = run_with_grads(torchkiln.compile(mlp, backend=["toy", "broken"]), *inputs)
    torch.testing.assert_close(actual, run_with_grads(mlp, *inputs))


@pytest.mark.parametrize(
    ("backend", "options", "error", "match"),
    [
        ([], None, InvalidBackendChain, r"names no backend"),
        (["toy", "nope"], None, UnknownBackendError, r"unknown backend 'nope'"),
        (["toy"], None, InvalidBackendChain, r"runs only some ops; end the chain"),
        (["eager", "toy"], None, InvalidBackendChain, r"put 'eager' last"),
        (["toy", "toy", "eager"], None, InvalidBackendChain, r"'toy' more than once"),
        (["toy", len], None, InvalidBackendChain, r"register it with"),
        (["toy", "eager"], {"eagr": {}}, InvalidOptionError, r"Did you mean 'eager'"),
        (["toy", "eager"], {"eager": {"x": 1}}, InvalidOptionError, r"takes no options"),
    ],
)
def test_invalid_chains_fail_at_compile_time(toy, backend, options, error, match):
    with pytest.raises(error, match=match):
        torchkiln.compile(mlp, backend=backend, options=options)


def test_mode_with_a_chain_asks_for_options_per_backend(toy):
    with pytest.raises(InvalidBackendChain, match=r"options=\{'<backend>'"):
        torchkiln.compile(mlp, backend=("toy", "eager"), mode="max-autotune")


def test_a_chain_of_one_full_backend_is_that_backend():
    compiler = resolve_backend(["eager"], None, {"eager": {}})
    assert compiler.compile_fn is registry.lookup_backend("eager").compile_fn


def random_graph(rng: random.Random, size: int) -> tuple[fx.GraphModule, dict[fx.Node, int]]:
    """A random DAG of ``size`` ops on two inputs, each op labelled with one of 3 backends."""
    graph = fx.Graph()
    values = [graph.placeholder("a"), graph.placeholder("b")]
    labels = {}
    for _ in range(size):
        args = rng.sample(values, rng.randint(1, 2))
        node = graph.call_function(torch.add if len(args) == 2 else torch.sin, tuple(args))
        labels[node] = rng.randrange(3)
        values.append(node)
    used = {i for n in graph.nodes for i in n.all_input_nodes}
    graph.output(tuple(v for v in values[2:] if v not in used))
    return fx.GraphModule(torch.nn.Module(), graph), labels


def _acyclic(succ: dict[int, set[int]]) -> bool:
    indegree = {p: 0 for p in succ}
    for targets in succ.values():
        for t in targets:
            indegree[t] += 1
    ready = [p for p, d in indegree.items() if not d]
    seen = 0
    while ready:
        p = ready.pop()
        seen += 1
        for t in succ[p]:
            indegree[t] -= 1
            if not indegree[t]:
                ready.append(t)
    return seen == len(succ)


def _contracted(owner: dict[fx.Node, int]) -> dict[int, set[int]]:
    succ = {p: set() for p in owner.values()}
    for node, p in owner.items():
        for i in node.all_input_nodes:
            if i in owner and owner[i] != p:
                succ[owner[i]].add(p)
    return succ


def test_random_graphs_split_into_maximal_acyclic_partitions():
    rng = random.Random(0)
    for trial, size in enumerate([*(rng.randint(1, 25) for _ in range(150)), 400]):
        gm, labels = random_graph(rng, size)
        partitions = group(gm.graph, labels.__getitem__)
        owner = {n: i for i, p in enumerate(partitions) for n in p.nodes}
        assert sorted(owner, key=str) == sorted(labels, key=str), trial  # each op exactly once
        for i, p in enumerate(partitions):
            assert {labels[n] for n in p.nodes} == {p.label}, trial
            earlier = {n for q in partitions[:i] for n in q.nodes}
            for n in p.nodes:  # in an order that runs: inputs from earlier partitions
                assert all(
                    x in earlier or x in p.nodes or x not in owner for x in n.all_input_nodes
                )
        succ = _contracted(owner)
        assert _acyclic(succ), trial
        for p, q in itertools.combinations(range(len(partitions)), 2):
            if partitions[p].label == partitions[q].label:  # maximal: merging makes a cycle
                merged = {n: (p if o == q else o) for n, o in owner.items()}
                assert not _acyclic(_contracted(merged)), trial
        a, b = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(split(gm, partitions)(a, b), gm(a, b))


def test_multi_output_ops_stay_with_their_getitems(toy):
    def fn(x):
        values, indices = torch.max(x * x, dim=1)
        return values * 2 + indices

    compiled_fn = torchkiln.compile(fn, backend="toy")
    x = torch.randn(4, 5)
    torch.testing.assert_close(compiled_fn(x), fn(x))


@pytest.mark.parametrize("given", ["both", "neither"])
def test_a_backend_gives_exactly_one_of_compile_fn_and_capabilities(given):
    caps = Capabilities(compile_partition=lambda gm, example_inputs: gm.forward, ops=ADD_MUL)
    kwargs = {"compile_fn": lambda gm, example_inputs: gm.forward, "capabilities": caps}
    if given == "neither":
        kwargs = {}
    with pytest.raises(TypeError, match=f"got {given} of compile_fn and capabilities"):
        Backend("half_declared", **kwargs)


def tanh_of_multiply_add(x, w):
    return torch.tanh(x * w + x) * 2


@pytest.mark.parametrize("saves_for_others", [False, True])
def test_a_backend_that_saves_for_others_gets_no_recomputation_for_the_next(
    saves_for_others, monkeypatch
):
    """``tanh_backward`` runs in eager, the backend after ``saver``: with
    ``saves_for_others`` the forward saves the ``tanh`` it reads, and the backward
    recomputes nothing (no partition of ``saver`` rebuilds ``x * w + x`` for eager)."""
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    compiled: list[fx.GraphModule] = []

    def compile_partition(gm, example_inputs):
        compiled.append(gm)
        return gm.forward

    caps = Capabilities(
        compile_partition=compile_partition,
        ops=ADD_MUL | {aten.tanh.default},
        decompositions=dict,  # none: tanh_backward stays whole, and eager's
        saves_for_others=saves_for_others,
    )
    torchkiln.register_backend(Backend("saver", capabilities=caps))
    compiled_fn = torchkiln.compile(tanh_of_multiply_add, backend="saver")
    for _ in range(2):
        inputs = fresh_inputs()
        actual = run_with_grads(compiled_fn, *inputs)
        torch.testing.assert_close(actual, run_with_grads(tanh_of_multiply_add, *inputs))
    _forward, *backward = compiled  # one forward partition: every op is the backend's
    recomputed = [n.target for gm in backward for n in compute_nodes(gm.graph)]
    assert (aten.tanh.default in recomputed) is not saves_for_others
