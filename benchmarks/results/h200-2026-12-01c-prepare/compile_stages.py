"""Compile each kernel that ``kernels_for_sm90.py`` kept for sm_90 through the compile-only
driver, one after the other, timing Triton's stages (``cpu-kernel-compile-sm90.txt``).

    TRITON_CACHE_DIR=$(mktemp -d) PYTHONPATH=. python compile_stages.py /tmp/mlpk
"""

import collections
import glob
import importlib.util
import json
import os
import sys
import time

STAGES = ("make_ttir", "make_ttgir", "make_llir", "make_ptx", "make_cubin")


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia import compiler as nvidia
    from triton.runtime import driver

    from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver

    driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    spent = collections.defaultdict(float)

    def timed(name):
        raw = nvidia.CUDABackend.__dict__[name]
        fn = raw.__func__ if isinstance(raw, staticmethod) else raw

        def stage(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start

        setattr(
            nvidia.CUDABackend,
            name,
            staticmethod(stage) if isinstance(raw, staticmethod) else stage,
        )

    for name in STAGES:
        timed(name)
    folder = sys.argv[1]
    with open(os.path.join(folder, "launches.json")) as f:
        launches = json.load(f)
    modules = []
    for path in glob.glob(os.path.join(folder, "kiln_*.py")):
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    totals = collections.defaultdict(float)
    for name, meta, warps, dtypes in launches:
        kernel = next(getattr(m, name) for m in modules if hasattr(m, name))
        spent.clear()
        start = time.perf_counter()
        dtypes = [getattr(torch, d.removeprefix("torch.")) for d in dtypes]
        kernel.warmup(*dtypes, grid=(4,), num_warps=warps, **meta)
        took = time.perf_counter() - start
        for stage in STAGES:
            totals[stage] += spent[stage]
        totals["total"] += took
        stages = " ".join(f"{s[5:]}={spent[s] * 1e3:.0f}" for s in STAGES)
        print(f"{name[:48]:48s} {meta} w{warps} {took * 1e3:6.0f} ms  {stages}")
    print(len(launches), "kernels:", " ".join(f"{k}={v:.2f}s" for k, v in totals.items()))


if __name__ == "__main__":
    main()
