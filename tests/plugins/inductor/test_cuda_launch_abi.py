"""``cuda_launch.DirectLaunch`` hands the CUDA driver exactly what Triton's own C launcher
does: the same grid, block, shared memory, stream, function and parameter values (the
kernel's arguments, then Triton's two scratch pointers). Both launch one kernel, compiled
for sm_90 without a GPU, against a stand-in ``libcuda.so.1`` that records each launch
(``data/recording_cuda.c``). Runs with the Triton imported where it builds its launcher
per signature (Triton 3.6, the GPU machine's), else with the Triton 3.6 that
``TORCHKILN_TEST_TRITON36`` names (a folder ``pip install --target`` filled: ``make test``
installs one there)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton", reason="triton is not installed")
nvidia_driver = pytest.importorskip("triton.backends.nvidia.driver")


def triton_with_launcher_builds() -> Path | None:
    """The folder of a Triton that builds C launchers, put ahead on the comparison's
    ``sys.path``: the imported Triton's, or the one ``TORCHKILN_TEST_TRITON36`` names; None
    where there is none."""
    if hasattr(nvidia_driver, "make_launcher"):
        return Path(triton.__file__).parent.parent
    site = os.environ.get("TORCHKILN_TEST_TRITON36")
    if site and (Path(site) / "triton" / "backends" / "nvidia" / "driver.py").exists():
        return Path(site)
    return None


SITE = triton_with_launcher_builds()
pytestmark = [
    pytest.mark.skipif(
        SITE is None,
        reason="needs Triton <= 3.6 (it builds the C launcher compared against): installed, "
        "or in the folder TORCHKILN_TEST_TRITON36 names",
    ),
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
]

COMPARE = r"""
import ctypes, json, os, sys
import torch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import driver as nvidia
from triton.runtime import driver
from torchkiln_inductor.codegen import cuda_launch
from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver

driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
sys.path.insert(0, sys.argv[1])
import kernel_module

kernel = kernel_module.k.warmup(
    torch.bfloat16, torch.float32, 1001, 2**40 + 3, torch.float32, grid=(1,), num_warps=8,
    XBLOCK=256,
)
recorder = ctypes.CDLL("libcuda.so.1")
types = [t for t in kernel.src.signature.values() if t != "constexpr"] + ["*u8", "*u8"]
ctypes.c_int.in_dll(recorder, "param_count").value = len(types)


class Launch(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
        ("num_attrs", ctypes.c_uint), ("stream", ctypes.c_uint64),
        ("function", ctypes.c_uint64), ("count", ctypes.c_uint64),
        ("params", ctypes.c_uint64 * 32),
    ]


def last_launch():
    launch = Launch.in_dll(recorder, "last")
    widths = [4 if t == "i32" else 8 for t in types]  # an i32 fills half its slot
    return dict(
        grid=list(launch.grid), block=list(launch.block), shared=launch.shared,
        attributes=launch.num_attrs, stream=launch.stream, function=launch.function,
        params=[p & ((1 << 8 * w) - 1) for p, w in zip(launch.params, widths)],
    )


class Pointer:
    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


a, b, c = 0x7F0000001000, 0x7F0000002040, 0x7F0000003000
n, m = 1001, -(2**40) - 3
function, stream, grid = 0xABC0, 0x5150, (4, 2, 1)
triton_launcher = nvidia.CudaLauncher(kernel.src, kernel.metadata)
triton_launcher(*grid, stream, function, kernel.packed_metadata, None, None, None,
                Pointer(a), Pointer(b), n, m, Pointer(c), 256)
through_triton = last_launch()
kernel.module, kernel.function = 1, function  # loaded: DirectLaunch loads nothing
assert cuda_launch.launchable(kernel)
cuda_launch.DirectLaunch(kernel, 0)(*grid, stream, [a, b, n, m, c])
direct = last_launch()
# the launcher a profiler's launch hooks get for a kernel DirectLaunch loaded (through the
# driver's launcher class, which the compile-only driver has none of)
driver.active.launcher_cls = nvidia.CudaLauncher
hooked = cuda_launch.triton_launcher(kernel)
hooked(*grid, stream, function, kernel.packed_metadata, None, None, None,
       Pointer(a), Pointer(b), n, m, Pointer(c), 256)
print(json.dumps([through_triton, direct, last_launch()]))
"""

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def k(a_ptr, b_ptr, n, m, c_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < n
    x = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(b_ptr + offsets * m, mask=mask)
    tl.store(c_ptr + offsets, x + y, mask=mask)
"""


def test_direct_launch_passes_the_driver_what_tritons_launcher_passes(tmp_path):
    include = SITE / "triton" / "backends" / "nvidia" / "include"
    source = Path(__file__).with_name("data") / "recording_cuda.c"
    library = tmp_path / "libcuda.so.1"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", f"-I{include}", "-o", library, source], check=True
    )
    (tmp_path / "libcuda.so").symlink_to(library)
    (tmp_path / "kernel_module.py").write_text(KERNEL)
    environ = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(SITE), *sys.path]),
        LD_LIBRARY_PATH=str(tmp_path),
        TRITON_LIBCUDA_PATH=str(tmp_path),
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
    )
    environ.pop("TRITON_INTERPRET", None)
    done = subprocess.run(
        [sys.executable, "-c", COMPARE, str(tmp_path)],
        env=environ, stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    through_triton, direct, hooked = json.loads(done.stdout.splitlines()[-1])
    assert through_triton["grid"] == [4, 2, 1] and through_triton["block"] == [256, 1, 1]
    assert through_triton["params"][:5] == [
        0x7F0000001000, 0x7F0000002040, 1001, (-(2**40) - 3) % 2**64, 0x7F0000003000,
    ]  # fmt: skip
    assert direct == through_triton
    assert hooked == through_triton
