"""The device-neutral seam: bodies recorded once as ops lists, kernel plans, device capabilities."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import aten_graph, check

import torchkiln_inductor.compile_fx as compile_fx_module
from torchkiln_inductor.codegen.cpp import _UNARY_FLOAT, STORAGE_TYPES, CppOpsHandler
from torchkiln_inductor.compile_fx import generate
from torchkiln_inductor.device import CPP
from torchkiln_inductor.indexing import Expr, Var
from torchkiln_inductor.loop_body import ops, record, store
from torchkiln_inductor.options import parse_options

x0 = Expr.of(Var("x0", 8))


def gather_body():
    row = ops.indirect_indexing(ops.load("idx", x0, torch.int64), 4)
    inside = ops.lt(ops.index_expr(x0, torch.int64), ops.constant(6, torch.int64))
    masked = ops.masked(inside, lambda: ops.load("table", row * 3 + 1, torch.bfloat16), 0.0)
    again = ops.load("table", row * 3 + 1, torch.bfloat16)  # not folded into the masked load
    total = ops.add(ops.add(masked, again), ops.add(masked, again))  # folded: one add
    store("out", x0, ops.to_dtype(ops.to_dtype(total, torch.float32), torch.bfloat16))


def test_body_is_recorded_once_into_a_printable_ops_list():
    body = record(gather_body)
    assert str(body) == "\n".join(
        [
            "%0 = load(idx, x0) : int64",
            "%1 = indirect_indexing(%0, 4, True) : int64",
            "%2 = index_expr(x0, int64) : int64",
            "%3 = constant(6, int64) : int64",
            "%4 = lt(%2, %3) : bool",
            "%5 = masked(%4, 0.0) : float32 {",
            "    %6 = load(table, 3L*%1 + 1L) : float32",
            "    yield %6",
            "}",
            "%7 = load(table, 3L*%1 + 1L) : float32",
            "%8 = add(%5, %7) : float32",
            "%9 = add(%8, %8) : float32",
            "%10 = to_dtype(%9, bfloat16) : float32",
            "store(out, x0, %10)",
        ]
    )
    assert [name for name, _ in body.loads()] == ["idx", "table", "table"]
    o0 = Expr.of(Var("o0", 16))
    moved = body.subs({Var("x0", 8): o0.floordiv(2)})
    assert str(moved.store.args[1]) == "((o0) / 2)"
    assert str(body.store.args[1]) == "x0"  # the recorded body is unchanged


def test_ops_outside_a_recording_are_an_error():
    with pytest.raises(RuntimeError, match="outside of a loop body"):
        ops.add(None, None)
    with pytest.raises(AttributeError, match="not an op"):
        ops.sine  # noqa: B018


def test_trace_writes_the_ops_lists_of_buffers_and_of_fused_kernels(tmp_path):
    x, w, b = torch.randn(64, 256), torch.randn(256), torch.randn(256)
    options = {"trace.enabled": True, "trace.dir": str(tmp_path)}
    check(lambda x, w, b: F.layer_norm(x, (256,), w, b), x, w, b, **options)
    (folder,) = tmp_path.iterdir()
    ir = (folder / "ir_before_fusion.txt").read_text()
    assert "reduction welford[1] over [64, 1] x [256]" in ir
    assert "= reduction(welford, %0) : float32" in ir
    fused = (folder / "schedule_after_fusion.txt").read_text()
    assert "%0 = load(arg0, i0 + 256L*o0) : float32" in fused  # in the kernel's loop variables
    assert "  reads arg0, arg1, arg2" in fused


def test_layer_norm_plan_reduces_then_normalizes_in_one_outer_loop():
    x, w, b = torch.randn(64, 256), torch.randn(256), torch.randn(256)
    fn = lambda x, w, b: F.layer_norm(x, (256,), w, b)  # noqa: E731
    generated = generate(aten_graph(fn, x, w, b), [x, w, b], parse_options({}))
    (plan,) = generated.plans.values()
    assert plan.kernel.outer == (64,)
    assert [seg.inner for seg in plan.segments] == [(256,), (256,)]
    assert [[n.is_reduction for n in seg.nodes] for seg in plan.segments] == [[True, True], [False]]
    assert plan.inputs == ["arg0", "arg1", "arg2"]
    (out,) = generated.graph.outputs
    assert plan.stored == {out.buffer.name} and not plan.local


def test_lowering_sends_what_the_device_lacks_to_aten(monkeypatch):
    caps = dataclasses.replace(CPP, ops=CPP.ops - {"sin"}, dtypes=CPP.dtypes - {torch.float64})
    monkeypatch.setattr(compile_fx_module, "device_caps", lambda device, cpu_backend: caps)
    compiled = check(lambda x, y: (x.sin() * 2, y * 2), torch.randn(8, 8), torch.randn(3).double())
    assert compiled.fallbacks["aten.sin.default"] == "the cpp code generator has no sin"
    assert compiled.fallbacks["aten.mul.Tensor"] == "dtype torch.float64 has no cpp lowering"


def test_cpp_generator_emits_every_op_and_dtype_its_capabilities_declare():
    missing = {n for n in CPP.ops if n not in _UNARY_FLOAT and not hasattr(CppOpsHandler, n)}
    assert not missing
    assert set(STORAGE_TYPES) == CPP.dtypes
