"""The on-disk plan cache: keys, hits that skip tracing and compiling, damaged entries."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from aot_testing import RecordingCompiler

import torchkiln
from torchkiln.aot import ArtifactCodec, aot_autograd
from torchkiln.aot.cache import PlanCache, graph_fingerprint
from torchkiln.aot.partition import min_cut_partition
from torchkiln.disk_cache import stable_name


def gelu_mlp(x, w, b):
    return torch.nn.functional.gelu(x @ w + b).sum(-1)


def inputs(requires_grad: bool = True, rows: int = 8) -> list[torch.Tensor]:
    return [
        torch.randn(rows, 16),
        torch.randn(16, 16, requires_grad=requires_grad),
        torch.randn(16, requires_grad=requires_grad),
    ]


# graph modules pickle as their code: a codec for tests that needs no backend
GRAPH_CODEC = ArtifactCodec("test graphs", dump=lambda gm: gm, load=lambda gm: gm)


class GraphCompiler(RecordingCompiler):
    """Records the graphs it is given and returns the graph module itself (picklable)."""

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> object:
        super().__call__(gm, example_inputs)
        return gm


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    torchkiln.reset()
    return tmp_path


def compile_fresh(fn, args, codec=GRAPH_CODEC):
    """What a new process does: a fresh graph, fresh compilers, the same cache folder."""
    compiler = GraphCompiler()
    compiled = aot_autograd(fw_compiler=compiler, cache=codec)(fx.symbolic_trace(fn), args)
    return compiled, compiler


def eager_and_compiled_grads(compiled, args):
    out = compiled(*args)
    expected = gelu_mlp(*args)
    torch.testing.assert_close(out, expected)
    got = torch.autograd.grad(out.sum(), args[1:])
    want = torch.autograd.grad(expected.sum(), args[1:])
    torch.testing.assert_close(got, want)


def test_training_plan_is_stored_after_backward_and_reused_without_tracing() -> None:
    args = inputs()
    compiled, first = compile_fresh(gelu_mlp, args)
    eager_and_compiled_grads(compiled, args)
    assert len(first.graphs) == 2  # forward, then backward on the first backward call
    assert torchkiln.counters["aot_cache"]["stores"] == 1

    fresh = inputs()
    compiled, second = compile_fresh(gelu_mlp, fresh)
    assert second.graphs == []  # nothing traced or compiled
    eager_and_compiled_grads(compiled, fresh)
    assert second.graphs == []
    assert torchkiln.counters["aot_cache"]["hits"] == 1


def test_a_plan_whose_backward_never_ran_is_not_stored() -> None:
    args = inputs()
    compiled, _ = compile_fresh(gelu_mlp, args)
    compiled(*args)
    assert torchkiln.counters["aot_cache"]["stores"] == 0
    _, second = compile_fresh(gelu_mlp, args)
    assert len(second.graphs) == 1


def test_inference_plan_is_stored_at_once() -> None:
    args = inputs(requires_grad=False)
    compile_fresh(gelu_mlp, args)
    compiled, second = compile_fresh(gelu_mlp, inputs(requires_grad=False))
    assert second.graphs == []
    fresh = inputs(requires_grad=False)
    torch.testing.assert_close(compiled(*fresh), gelu_mlp(*fresh))


def test_other_shapes_miss() -> None:
    compile_fresh(gelu_mlp, inputs(requires_grad=False))
    _, second = compile_fresh(gelu_mlp, inputs(requires_grad=False, rows=4))
    assert len(second.graphs) == 1
    assert torchkiln.counters["aot_cache"]["hits"] == 0


def key_of(fn, args, training=True, codec=GRAPH_CODEC) -> str | None:
    return PlanCache(codec, None, min_cut_partition).key(fx.symbolic_trace(fn), args, training)


def test_key_names_what_tracing_depends_on() -> None:
    base = key_of(gelu_mlp, inputs())
    assert base is not None
    assert key_of(gelu_mlp, inputs()) == base  # values do not matter
    assert key_of(gelu_mlp, inputs(requires_grad=False)) != base
    assert key_of(gelu_mlp, inputs(), training=False) != base
    assert key_of(gelu_mlp, [a.double() for a in inputs()]) != base
    x, w, b = inputs()
    assert key_of(gelu_mlp, [x, w.t().contiguous().t(), b]) != base  # strides
    assert key_of(gelu_mlp, inputs(), codec=ArtifactCodec("other", None, None)) != base
    with torch.autocast("cpu"):
        assert key_of(gelu_mlp, inputs()) != base


def test_key_ignores_decompositions_an_import_registers() -> None:
    """torch.distributed's collectives register theirs when imported: a process that
    imported it before compiling, and one that did not, share entries."""
    import torch.distributed._functional_collectives  # registers the op below
    from torch._decomp import decomposition_table

    def key(table):
        cache = PlanCache(GRAPH_CODEC, table, min_cut_partition)
        return cache.key(fx.symbolic_trace(gelu_mlp), inputs(), True)

    aten = torch.ops.aten
    table = {aten.gelu.default: decomposition_table[aten.gelu.default]}
    collective = torch.ops.c10d_functional.all_reduce.default
    assert key({**table, collective: lambda *a: None}) == key(table)
    assert key({}) != key(table)


def test_inputs_sharing_storage_get_another_key() -> None:
    def add(x, y):
        return x + y

    x = torch.randn(4)
    assert key_of(add, [x, x]) != key_of(add, [x, x.clone()])


def test_calls_without_an_importable_name_are_not_cached() -> None:
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(lambda t: t + 1, (x,)))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    assert PlanCache(GRAPH_CODEC, None, min_cut_partition).key(gm, [torch.randn(2)], False) is None
    assert torchkiln.counters["aot_cache"]["uncacheable"] == 1


def test_stable_names_find_the_same_object() -> None:
    assert stable_name(torch.ops.aten.mm.default) == "op:aten.mm.default"
    assert stable_name(torch.nn.functional.gelu) == "torch._C._nn:gelu"
    assert stable_name(torch.add).startswith("torch:")
    assert stable_name(torch.Tensor.add).endswith(".add")
    assert "gelu" in graph_fingerprint(fx.symbolic_trace(gelu_mlp))


def test_tensor_constants_are_keyed_by_value() -> None:
    def with_constant(value: float):
        gm = fx.symbolic_trace(lambda x: x + 1)
        gm.register_buffer("c", torch.full((2,), value))
        node = next(n for n in gm.graph.nodes if n.op == "call_function")
        with gm.graph.inserting_before(node):
            node.args = (node.args[0], gm.graph.get_attr("c"))
        gm.recompile()
        return PlanCache(GRAPH_CODEC, None, min_cut_partition).key(gm, [torch.randn(2)], False)

    assert with_constant(1.0) == with_constant(1.0)
    assert with_constant(1.0) != with_constant(2.0)


def test_damaged_entry_is_rebuilt(cache_dir) -> None:
    args = inputs(requires_grad=False)
    compile_fresh(gelu_mlp, args)
    (entry,) = cache_dir.rglob("*.pkl")
    entry.write_bytes(b"not a pickle")
    compiled, second = compile_fresh(gelu_mlp, args)
    assert len(second.graphs) == 1
    torch.testing.assert_close(compiled(*args), gelu_mlp(*args))
    compile_fresh(gelu_mlp, args)
    assert torchkiln.counters["aot_cache"]["hits"] == 1  # the rebuilt entry


def test_a_backend_that_cannot_store_its_graph_is_not_cached() -> None:
    codec = ArtifactCodec("no artifacts", dump=lambda compiled: None, load=lambda a: a)
    args = inputs(requires_grad=False)
    compiled, _ = compile_fresh(gelu_mlp, args, codec)
    torch.testing.assert_close(compiled(*args), gelu_mlp(*args))
    assert torchkiln.counters["aot_cache"]["stores"] == 0
    assert torchkiln.counters["aot_cache"]["uncacheable"] == 1


def test_before_trace_runs_when_a_graph_is_traced_not_when_its_plan_is_loaded() -> None:
    """A backend starts its slow helpers (inductor: Triton compile workers) in
    ``before_trace``: a plan from the cache needs none of them."""
    traces = []

    def compile_with_hook(args):
        compiler = GraphCompiler()
        return aot_autograd(
            fw_compiler=compiler, cache=GRAPH_CODEC, before_trace=lambda: traces.append(1)
        )(fx.symbolic_trace(gelu_mlp), args)

    args = inputs()
    eager_and_compiled_grads(compile_with_hook(args), args)
    assert traces == [1]
    fresh = inputs()
    eager_and_compiled_grads(compile_with_hook(fresh), fresh)
    assert traces == [1]  # loaded from the cache: nothing traced


def test_graph_pass_rewrites_what_is_traced_and_is_skipped_when_the_plan_is_loaded() -> None:
    """Plans are keyed by the graph as captured: a plan from the cache needs no pass (the
    inductor's rewrite of attention would otherwise run fake tensors in a warm process)."""
    passes = []

    def doubled(gm: fx.GraphModule, fake_inputs: list) -> fx.GraphModule:
        passes.append([type(x).__name__ for x in fake_inputs])
        return fx.symbolic_trace(lambda x, w, b: gelu_mlp(x, w, b) * 2)

    def compile_with_pass(args):
        captured = fx.symbolic_trace(gelu_mlp)
        compiled = aot_autograd(fw_compiler=GraphCompiler(), cache=GRAPH_CODEC, graph_pass=doubled)
        return compiled(captured, args), captured

    args = inputs(requires_grad=False)
    compiled, captured = compile_with_pass(args)
    torch.testing.assert_close(compiled(*args), gelu_mlp(*args) * 2)
    torch.testing.assert_close(captured(*args), gelu_mlp(*args))  # kept as captured
    assert passes == [["FakeTensor"] * 3]
    compiled, _ = compile_with_pass(args)
    torch.testing.assert_close(compiled(*args), gelu_mlp(*args) * 2)
    assert len(passes) == 1 and torchkiln.counters["aot_cache"]["hits"] == 1
