"""How many of a cold compile's Triton cache entries are C launchers (built with gcc per
kernel signature by Triton <= 3.6), and what one launcher build costs against one kernel
compile. Runs kiln's cold mlp training step on a fresh cache, then lists the cache.

    python launchers.py     # from the repository root, on the GPU machine
"""

import glob
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def k(a, b, c, d, n, XBLOCK: tl.constexpr):
    o = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = o < n
    tl.store(d + o, tl.load(a + o, mask=m) * tl.load(b + o, mask=m) + tl.load(c + o, mask=m), mask=m)
"""


def main() -> None:
    from benchmarks.caches import cache_env

    os.environ.update(cache_env(Path(tempfile.mkdtemp())))
    import torch
    from triton.backends.nvidia import driver as nvidia

    from benchmarks import compile_phases

    r = compile_phases.child("mlp", "kiln:inductor", "training", "cuda", "large", 0)
    print("first step", round(r["first"], 2), r["counters"].get("triton_workers"))
    entries = glob.glob(os.path.join(os.environ["TRITON_CACHE_DIR"], "*"))
    launchers = [e for e in entries if glob.glob(os.path.join(e, "*launcher*.so"))]
    cubins = [e for e in entries if glob.glob(os.path.join(e, "*.cubin"))]
    print(
        f"cache entries {len(entries)} with a launcher .so {len(launchers)} with a cubin {len(cubins)}"
    )
    # one kernel compile and one launcher build, timed apart, on a fresh cache
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    path = Path(tempfile.mkdtemp()) / "probe_k.py"
    path.write_text(KERNEL)
    spec = importlib.util.spec_from_file_location("probe_k", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.zeros(4096, device="cuda", dtype=torch.bfloat16)
    start = time.perf_counter()
    kernel = module.k.warmup(x, x, x, x, 4096, grid=(32,), XBLOCK=128, num_warps=4)
    compile_s = time.perf_counter() - start
    launcher_s = None
    if hasattr(nvidia, "make_launcher"):
        start = time.perf_counter()
        nvidia.CudaLauncher(kernel.src, kernel.metadata)
        launcher_s = time.perf_counter() - start
    print("kernel compile s", round(compile_s, 3), "launcher build s", launcher_s)


main()
