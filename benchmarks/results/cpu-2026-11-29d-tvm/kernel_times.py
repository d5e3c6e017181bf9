"""Where a zoo model's time goes in kiln:tvm: each TIR kernel of each graph, built alone and
timed on random inputs, times the calls of it in the graph (and the torch kernels called).

    TORCHKILN_CACHE_DIR=$(mktemp -d) PYTHONPATH=. TVM_NUM_THREADS=1 \
        .venv/bin/python benchmarks/results/cpu-2026-11-29d-tvm/kernel_times.py MODEL [TOP]

A fresh cache dir: a plan loaded from the cache compiles no graph, so none is captured.
"""

import collections
import sys
import time

import numpy as np
import torch
import tvm
from tvm import relax
from tvm.s_tir import dlight
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

import torchkiln
from benchmarks.models import MODELS
from torchkiln_tvm import compiler, schedule, targets

torch.set_num_threads(1)
graphs = []
compile_graph = compiler.compile_aten_graph


def capture(gm, example_inputs, **options):
    graphs.append(gm)
    return compile_graph(gm, example_inputs, **options)


def median_ms(fn, inputs, n=20):
    with torch.no_grad():
        fn(*inputs)
        times = []
        for _ in range(n):
            start = time.perf_counter()
            fn(*inputs)
            times.append(time.perf_counter() - start)
    return sorted(times)[n // 2] * 1e3


def kernel_ms(func, target):
    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)
    rng = np.random.default_rng(0)
    args = []
    for info in ArgInfo.from_prim_func(func):
        shape, dtype = [int(d) for d in info.shape], str(info.dtype)
        value = rng.standard_normal(shape) if "float" in dtype else np.zeros(shape)
        args.append(tvm.runtime.tensor(np.asarray(value, dtype=dtype)))
    timer = lib.time_evaluator("main", tvm.cpu(), number=5, repeat=3, min_repeat_ms=20)
    return min(timer(*args).results) * 1e3


def main(name, top):
    compiler.compile_aten_graph = capture
    built = MODELS[name].build("small")
    model = built.module.eval()
    compiled = torchkiln.compile(model, backend="tvm")
    eager_ms, tvm_ms = median_ms(model, built.inputs), median_ms(compiled, built.inputs)
    print(f"{name}: eager {eager_ms:.2f} ms, kiln:tvm {tvm_ms:.2f} ms, {len(graphs)} graphs")
    target = targets.host()
    call_tir = tvm.ir.Op.get("relax.call_tir")
    packed = {tvm.ir.Op.get("relax.call_dps_packed"), tvm.ir.Op.get("relax.call_pure_packed")}
    for gm in graphs:
        mod, _ = compiler.to_relax(gm, extern_ops=True)
        passes = [
            *schedule.kernel_passes(target),
            dlight.ApplyDefaultSchedule(schedule.LoopOrder()),
        ]
        with tvm.transform.PassContext(opt_level=3), target:
            mod = tvm.transform.Sequential(passes)(mod)
        calls, torch_calls = collections.Counter(), collections.Counter()

        def visit(expr, calls=calls, torch_calls=torch_calls):
            if isinstance(expr, relax.Call) and expr.op == call_tir:
                calls[expr.args[0].name_hint] += 1
            elif isinstance(expr, relax.Call) and expr.op in packed:
                torch_calls[str(expr.args[0].global_symbol)] += 1

        relax.analysis.post_order_visit(mod["main"], visit)
        rows = []
        for gv, func in mod.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and calls[gv.name_hint]:
                ms = kernel_ms(func, target)
                rows.append((ms * calls[gv.name_hint], ms, calls[gv.name_hint], gv.name_hint))
        total = sum(r[0] for r in rows)
        print(f"graph: TIR kernels {total:.3f} ms in {sum(calls.values())} calls; torch's:")
        print(f"  {dict(torch_calls)}")
        for all_ms, ms, n, kernel in sorted(rows, reverse=True)[:top]:
            print(f"  {all_ms:8.3f} ms = {ms:.4f} x {n:3d}  {kernel}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)
