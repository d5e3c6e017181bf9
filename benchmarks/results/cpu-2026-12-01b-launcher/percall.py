"""Host time of one launch of a 6-pointer kernel (compiled for sm_90 without a GPU) through
Triton 3.6's launcher and through ``cuda_launch.DirectLaunch``, against the stand-in
driver.

    LD_LIBRARY_PATH=DIR TRITON_LIBCUDA_PATH=DIR TRITON_CACHE_DIR=$(mktemp -d) \
        PYTHONPATH=.triton36:. python percall.py
"""

import ctypes
import importlib.util
import os
import tempfile
import timeit

import torch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import driver as nvidia
from triton.runtime import driver

from torchkiln_inductor.codegen import cuda_launch
from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver

CALLS = 200000
KERNEL = """
import triton
import triton.language as tl


@triton.jit
def k(a, b, c, d, e, f, XBLOCK: tl.constexpr):
    o = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    x = tl.load(a + o) + tl.load(b + o) + tl.load(c + o) + tl.load(d + o) + tl.load(e + o)
    tl.store(f + o, x)
"""


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    path = os.path.join(tempfile.mkdtemp(), "km.py")
    with open(path, "w") as f:
        f.write(KERNEL)
    spec = importlib.util.spec_from_file_location("km", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tensors = [torch.empty(1024) for _ in range(6)]
    kernel = module.k.warmup(*tensors, grid=(1,), num_warps=4, XBLOCK=256)
    ctypes.c_int.in_dll(ctypes.CDLL("libcuda.so.1"), "param_count").value = 8
    launcher = nvidia.CudaLauncher(kernel.src, kernel.metadata)
    packed = kernel.packed_metadata

    def through_triton():
        launcher(4, 1, 1, 0, 0xABC, packed, None, None, None, *tensors, 256)

    kernel.module, kernel.function = 1, 0xABC
    direct = cuda_launch.DirectLaunch(kernel, 0)

    def directly():
        direct(4, 1, 1, 0, [t.data_ptr() for t in tensors])

    for name, call in (("triton", through_triton), ("direct", directly)) * 2:
        seconds = min(timeit.repeat(call, number=CALLS, repeat=5)) / CALLS
        print(f"{name} {seconds * 1e6:.2f} us")


if __name__ == "__main__":
    main()
