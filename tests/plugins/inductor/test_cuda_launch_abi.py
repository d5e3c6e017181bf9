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

#: What both comparisons start with: Triton compiling for sm_90, the test's kernel module
#: (``sys.argv[1]``), and the recording driver's last launch read back
PRELUDE = r"""
import ctypes, json, sys
import torch
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia import driver as nvidia
from triton.runtime import driver
from torchkiln_inductor.codegen import cuda_launch
from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver

driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
sys.path.insert(0, sys.argv[1])
import kernel_module

recorder = ctypes.CDLL("libcuda.so.1")


class Launch(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
        ("num_attrs", ctypes.c_uint), ("stream", ctypes.c_uint64),
        ("function", ctypes.c_uint64), ("count", ctypes.c_uint64),
        ("params", ctypes.c_uint64 * 32),
    ]


def last_launch(widths):
    # the last launch, its parameters read as ``widths`` bytes each (an i32 fills half its
    # slot); the recorder copies ``param_count`` of them at each launch
    launch = Launch.in_dll(recorder, "last")
    return dict(
        grid=list(launch.grid), block=list(launch.block), shared=launch.shared,
        attributes=launch.num_attrs, stream=launch.stream, function=launch.function,
        params=[p & ((1 << 8 * w) - 1) for p, w in zip(launch.params, widths)],
    )
"""

COMPARE = (
    PRELUDE
    + r"""
kernel = kernel_module.k.warmup(
    torch.bfloat16, torch.float32, 1001, 2**40 + 3, torch.float32, grid=(1,), num_warps=8,
    XBLOCK=256,
)
types = [t for t in kernel.src.signature.values() if t != "constexpr"] + ["*u8", "*u8"]
widths = [4 if t == "i32" else 8 for t in types]
ctypes.c_int.in_dll(recorder, "param_count").value = len(widths)


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
through_triton = last_launch(widths)
kernel.module, kernel.function = 1, function  # loaded: DirectLaunch loads nothing
assert cuda_launch.launchable(kernel)
cuda_launch.DirectLaunch(kernel, 0)(*grid, stream, [a, b, n, m, c])
direct = last_launch(widths)
# the launcher a profiler's launch hooks get for a kernel DirectLaunch loaded (through the
# driver's launcher class, which the compile-only driver has none of)
driver.active.launcher_cls = nvidia.CudaLauncher
hooked = cuda_launch.triton_launcher(kernel)
hooked(*grid, stream, function, kernel.packed_metadata, None, None, None,
       Pointer(a), Pointer(b), n, m, Pointer(c), 256)
print(json.dumps([through_triton, direct, last_launch(widths)]))
"""
)

#: The kernel of ``COMPARE`` kept in torchkiln's binary index (``triton_binaries``), its
#: direct launch recorded
STORE = (
    COMPARE
    + r"""
from abi_key import KEY
from torchkiln_inductor.codegen import triton_binaries
from torchkiln_inductor.codegen.triton_compile_worker import record_of

triton_binaries.remember(KEY, record_of(kernel))
"""
)

#: A fresh process launches the stored kernel as ``COMPARE``'s direct launch, with nothing
#: of Triton imported
LOAD_STORED = r"""
import ctypes, json, sys
import torch
from torchkiln_inductor.codegen import cuda_launch, triton_binaries

sys.path.insert(0, sys.argv[1])
from abi_key import KEY, widths, last_launch, recorder

kernel = triton_binaries.load(KEY)
assert isinstance(kernel, cuda_launch.StoredKernel), kernel
ctypes.c_int.in_dll(recorder, "param_count").value = len(widths)
a, b, c = 0x7F0000001000, 0x7F0000002040, 0x7F0000003000
cuda_launch.DirectLaunch(kernel, 0)(4, 2, 1, 0x5150, [a, b, 1001, -(2**40) - 3, c])
image = bytes((ctypes.c_ubyte * 4).in_dll(recorder, "loaded_image"))
print(json.dumps([last_launch(widths), image.hex(), "triton" in sys.modules]))
"""

#: What both of those processes share: the kernel's key, reading the recorded launches
ABI_KEY = """
import ctypes
from torchkiln_inductor.codegen.triton_binaries import BinaryKey

KEY = BinaryKey("kiln_" + "0" * 24 + ".py", "k", ("bfloat16", "float32", "float32"),
                (True,) * 3, (("XBLOCK", 256),), 8, None, 90)
widths = [8, 8, 4, 8, 8, 8, 8]
recorder = ctypes.CDLL("libcuda.so.1")
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


def _run_against_recording_driver(tmp_path: Path, script: str, kernels: str, **env: str) -> list:
    """Run ``script`` (its JSON line returned) in a process whose ``libcuda.so.1`` is the
    recording stand-in, built into ``tmp_path`` beside the kernel module ``kernels``, and
    whose Triton builds C launchers; ``env`` added to its environment."""
    include = SITE / "triton" / "backends" / "nvidia" / "include"
    source = Path(__file__).with_name("data") / "recording_cuda.c"
    library = tmp_path / "libcuda.so.1"
    if not library.exists():  # built once for the test's processes
        command = ["gcc", "-shared", "-fPIC", "-O1", f"-I{include}", "-o", library, source]
        subprocess.run(command, check=True)
        (tmp_path / "libcuda.so").symlink_to(library)
    environ = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(SITE), *sys.path]),
        LD_LIBRARY_PATH=str(tmp_path),
        TRITON_LIBCUDA_PATH=str(tmp_path),
        TRITON_CACHE_DIR=str(tmp_path / "triton"),
        **env,
    )
    environ.pop("TRITON_INTERPRET", None)
    (tmp_path / "kernel_module.py").write_text(kernels)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=environ, stdout=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


def test_a_stored_kernel_launches_as_it_did_in_a_process_that_never_imports_triton(tmp_path):
    """A warm start loads a kernel's binary from its record (``StoredKernel``) and launches
    it exactly as the process that compiled it did, without importing Triton."""
    prelude_end = PRELUDE.index("class Launch")
    reading = PRELUDE[prelude_end:]  # the recorded launch's structure and last_launch
    (tmp_path / "abi_key.py").write_text(ABI_KEY + reading)
    environ = {"TORCHKILN_CACHE_DIR": str(tmp_path / "kiln")}
    compiled = _run_against_recording_driver(tmp_path, STORE, KERNEL, **environ)
    launch, image, imported_triton = _run_against_recording_driver(
        tmp_path, LOAD_STORED, KERNEL, **environ
    )
    assert launch == compiled[1]  # COMPARE's direct launch
    assert image == "7f454c46"  # the cubin, an ELF file
    assert not imported_triton


def test_direct_launch_passes_the_driver_what_tritons_launcher_passes(tmp_path):
    through_triton, direct, hooked = _run_against_recording_driver(tmp_path, COMPARE, KERNEL)
    assert through_triton["grid"] == [4, 2, 1] and through_triton["block"] == [256, 1, 1]
    assert through_triton["params"][:5] == [
        0x7F0000001000, 0x7F0000002040, 1001, (-(2**40) - 3) % 2**64, 0x7F0000003000,
    ]  # fmt: skip
    assert direct == through_triton
    assert hooked == through_triton


LAUNCHERS = (
    PRELUDE
    + r"""
from triton import knobs
from torchkiln_inductor.codegen.triton_launch import LeanLauncher, SizedLeanLauncher

# no GPU: the current stream is a made-up handle, and loading a binary sets made-up handles
torch._C._cuda_getCurrentRawStream = lambda device: 0x5150
cuda_launch.load = lambda kernel, device: (
    setattr(kernel, "module", 1), setattr(kernel, "function", 0xABC0)
)
# the launches' five parameters: three pointers, or two and a size, then the two scratch ones
widths = [8] * 5
ctypes.c_int.in_dll(recorder, "param_count").value = len(widths)


# the kernels under a name as the inductor gives its modules: their binaries are recorded
import importlib.util, shutil
name = "kiln_" + "1" * 24
shutil.copy(kernel_module.__file__, f"{sys.argv[1]}/{name}.py")
spec = importlib.util.spec_from_file_location(name, f"{sys.argv[1]}/{name}.py")
kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernels)

a, b, c = (torch.empty(1024) for _ in range(3))
static = LeanLauncher(kernels.copy_add, (4,), {"XBLOCK": 256}, num_warps=4)
static(a, b, c)
first = last_launch(widths)
sized = SizedLeanLauncher(kernels.sized, (1,), {"XBLOCK": 128}, 4, None, ("n",))
sized(1000, a, b, 1000)
second = last_launch(widths)
# a profiler's launch hook: the launch goes through Triton's launcher, which calls it
driver.active.launcher_cls = nvidia.CudaLauncher  # the compile-only driver has none
seen = []
knobs.runtime.launch_enter_hook.add(seen.append)
static(a, b, c)
hooked = last_launch(widths)
pointers = [t.data_ptr() for t in (a, b, c)]
from torchkiln import counters
stored = isinstance(static._compiled[(True,) * 3][0], cuda_launch.StoredKernel)
binaries = dict(counters["triton_binaries"])
print(json.dumps([first, second, hooked, len(seen), pointers, binaries, stored]))
"""
)

LAUNCHED_KERNELS = """
import triton
import triton.language as tl


@triton.jit
def copy_add(a_ptr, b_ptr, c_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(c_ptr + offsets, tl.load(a_ptr + offsets) + tl.load(b_ptr + offsets))


@triton.jit(do_not_specialize=["n"])
def sized(a_ptr, b_ptr, n, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(b_ptr + offsets, tl.load(a_ptr + offsets, mask=offsets < n), mask=offsets < n)
"""


def test_lean_launchers_launch_directly_with_their_grids_and_arguments(tmp_path):
    """The inductor's launchers end to end (compiled for sm_90, loaded, launched): a static
    kernel with its fixed grid, a sized one with the grid of its call's ``xnumel`` and the
    size after the pointers; with a launch hook set, the same launch through Triton's
    launcher, which calls the hook. (Triton 3.6 keeps hooks in chains, never ``None``: the
    direct launch was taken for no kernel until this test.)"""
    cache = {"TORCHKILN_CACHE_DIR": str(tmp_path / "kiln")}
    compiled = _run_against_recording_driver(tmp_path, LAUNCHERS, LAUNCHED_KERNELS, **cache)
    # a second process finds both kernels in torchkiln's binary index (``StoredKernel``);
    # under the hook, the static one is exchanged for Triton's ``CompiledKernel`` of it
    loaded = _run_against_recording_driver(tmp_path, LAUNCHERS, LAUNCHED_KERNELS, **cache)
    for static, sized, hooked, hook_calls, (a, b, c), _, _ in (compiled, loaded):
        assert static == {
            "grid": [4, 1, 1], "block": [128, 1, 1], "shared": 0, "attributes": 0,
            "stream": 0x5150, "function": 0xABC0, "params": [a, b, c, 0, 0],
        }  # fmt: skip
        assert sized["grid"] == [8, 1, 1] and sized["block"] == [128, 1, 1]
        assert sized["params"] == [a, b, 1000, 0, 0]
        assert hooked == static and hook_calls == 1
    assert compiled[5].get("through_jit") == 2 and not compiled[6]
    assert loaded[5].get("loaded", 0) == 3 and "through_jit" not in loaded[5]
    assert not loaded[6]  # exchanged, for good
