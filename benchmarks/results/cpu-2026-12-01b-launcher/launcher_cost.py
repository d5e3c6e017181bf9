"""Each of a model's kernels compiled for sm_90 with Triton 3.6, then given its C launcher
(what ``CompiledKernel.run`` builds at a first launch): the time of each.

    TRITON_LIBCUDA_PATH=DIR TRITON_CACHE_DIR=$(mktemp -d) PYTHONPATH=.triton36:. \
        python launcher_cost.py KERNEL_FOLDER   # kernels_for_sm90.py's folder
"""

import glob
import importlib.util
import json
import os
import sys
import time

import torch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import driver as nvidia
from triton.runtime import driver

from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    folder = sys.argv[1]
    with open(os.path.join(folder, "launches.json")) as f:
        launches = json.load(f)
    modules = []
    for path in glob.glob(os.path.join(folder, "kiln_*.py")):
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    signatures = set()
    for name, meta, warps, dtypes in launches:
        fn = next(getattr(m, name) for m in modules if hasattr(m, name))
        dtypes = [getattr(torch, d.removeprefix("torch.")) for d in dtypes]
        start = time.perf_counter()
        kernel = fn.warmup(*dtypes, grid=(4,), num_warps=warps, **meta)
        compiled = time.perf_counter()
        try:
            nvidia.CudaLauncher(kernel.src, kernel.metadata)
        except ImportError:  # built, but the stand-in driver lacks what it links
            pass
        built = time.perf_counter()
        signature = tuple(kernel.src.signature.values())
        print(
            f"{name[:40]:40s} compile {1e3 * (compiled - start):5.0f} ms  "
            f"launcher {1e3 * (built - compiled):5.0f} ms  new_sig={signature not in signatures}"
        )
        signatures.add(signature)


if __name__ == "__main__":
    main()
