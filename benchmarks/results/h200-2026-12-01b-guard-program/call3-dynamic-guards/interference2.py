"""Where kiln's first-call tuning loses time after torch.compile ran in the process: counts
and times Triton compiles made in this process (cache misses) during kiln's first step."""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
from benchmarks.caches import cache_env


def child(variant: str) -> None:
    import torch
    import triton
    import triton.compiler.compiler as tc

    from benchmarks import compile_phases
    from benchmarks.cases import make_workload
    from benchmarks.models import MODELS
    from benchmarks.rows import on_device

    if variant == "after_torch_compile":
        built = on_device(MODELS["mlp"].build("large"), torch.device("cuda"), torch.bfloat16)
        work = make_workload(built.module, torch.compile(built.module), built.inputs, "training")
        work.step()
        torch.cuda.synchronize()
    from triton import knobs

    print(
        "libdevice",
        knobs.nvidia.libdevice_path,
        "ptxas",
        knobs.nvidia.ptxas.path,
        {k: v for k, v in os.environ.items() if k.startswith("TRITON")},
        file=sys.stderr,
    )
    print("threads", [t.name for t in threading.enumerate()], file=sys.stderr)
    stats = {"compiles": 0, "compile_s": 0.0, "in_threads": 0}
    real = tc.compile

    def compile(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            stats["compiles"] += 1
            stats["compile_s"] += time.perf_counter() - t
            stats["in_threads"] += threading.current_thread() is not threading.main_thread()

    tc.compile = compile
    triton.compile = compile
    import triton.runtime.jit as jit

    if hasattr(jit, "compile"):
        jit.compile = compile
    from triton.runtime import cache as tcache

    hits = {"get": 0, "miss": 0}
    real_get = tcache.FileCacheManager.get_group

    def get_group(self, filename):
        r = real_get(self, filename)
        hits["get" if r is not None else "miss"] += 1
        return r

    tcache.FileCacheManager.get_group = get_group
    r = compile_phases.child("mlp", "kiln:inductor", "training", "cuda", "large", 0)
    r["in_process_compiles"] = stats
    r["cache_groups"] = hits
    print(json.dumps(r))


def main() -> None:
    if len(sys.argv) > 1:
        child(sys.argv[1])
        return
    for variant in ["alone", "after_torch_compile"]:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, **cache_env(Path(tmp))}
            done = subprocess.run(
                [sys.executable, __file__, variant], env=env, stdout=subprocess.PIPE, text=True
            )
        try:
            r = json.loads(done.stdout.strip().splitlines()[-1])
        except Exception:
            print(variant, "failed", done.stdout[-2000:])
            continue
        print(
            variant,
            "first",
            round(r["first"], 2),
            "phases",
            {k: round(v, 2) for k, v in r["phases"].items()},
        )
        print(
            "   autotune",
            r["counters"].get("autotune"),
            "workers",
            r["counters"].get("triton_workers"),
        )
        print("   in-process compiles", r["in_process_compiles"], "cache groups", r["cache_groups"])


main()
