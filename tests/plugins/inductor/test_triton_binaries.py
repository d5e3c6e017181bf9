"""A kernel compiled once is found again by torchkiln's own key (``codegen/triton_binaries``):
its record names Triton's compiled binary, which loads without Triton's JIT.

No GPU is needed to compile and to find the binary: workers and child processes compile for
an H100's target (``sm90``, the ``sm90`` fixture) through the compile-only driver. Loading a binary onto a GPU and launching it are checked on the GPU machine
(``test_triton_binaries_gpu.py``).
"""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs triton")
pytest.importorskip("triton.backends.nvidia", reason="needs Triton's NVIDIA backend")

from torchkiln import counters  # noqa: E402
from torchkiln_inductor.codegen import triton_binaries, triton_workers  # noqa: E402

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets) * 2.0)
"""


def generated_module(tmp_path):
    """The kernels in a module named by its source's digest, as ``TritonModule.load`` writes."""
    digest = hashlib.sha256(KERNELS.encode()).hexdigest()[:24]
    path = tmp_path / f"kiln_{digest}.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def key(module, warps=4, aligned=(True, True), dtypes=(torch.float32, torch.float32)):
    code = module.scale.fn.__code__
    return triton_binaries.key_of(
        code.co_filename, code.co_name, dtypes, aligned, {"XBLOCK": 128}, warps, None
    )


#: A launcher's compile through Triton's JIT, in a process that compiles: prints the
#: kernel's record, a digest of its binary and its packed metadata.
JIT_SIDE = """
import hashlib, importlib.util, json, sys, torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver, record_of
driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
spec = importlib.util.spec_from_file_location("kernels", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
kernel = module.scale.warmup(
    torch.float32, torch.float32, grid=(4,), num_warps=int(sys.argv[2]), XBLOCK=128
)
binary = hashlib.sha256(kernel.kernel).hexdigest()
print(json.dumps([record_of(kernel), binary, list(kernel.packed_metadata)]))
"""


def jit_compile(module, warps=4):
    """``(record, digest of the binary, packed metadata)`` of the kernel compiled by
    Triton's JIT into this test's Triton cache."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    command = [sys.executable, "-c", JIT_SIDE, module.__file__, str(warps)]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_recorded_kernel_loads_as_the_jit_compiled_one(sm90, tmp_path):
    module = generated_module(tmp_path)
    record, binary, packed = jit_compile(module)
    assert triton_binaries.load(key(module)) is None  # nothing recorded yet
    triton_binaries.remember(key(module), record)
    loaded = triton_binaries.load(key(module), through_triton=True)
    assert triton_binaries.was_loaded(loaded)
    assert loaded.hash == record["hash"] and loaded.name == "scale"
    assert hashlib.sha256(loaded.kernel).hexdigest() == binary  # the same cubin
    assert set(loaded.asm) == {"cubin"}  # the IR texts beside it are not read
    assert list(loaded.packed_metadata) == packed
    # what the launcher reads of the source, as Triton had it
    assert loaded.src.signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "XBLOCK": "constexpr"}
    assert loaded.src.constants == {(2,): 128}
    assert loaded.src.fn.arg_names == ["x_ptr", "y_ptr", "XBLOCK"]


def test_a_kernel_launched_directly_loads_from_its_record_alone(sm90, tmp_path):
    """Where ``cuda_launch.DirectLaunch`` launches a kernel (Triton 3.6, which builds a C
    launcher per signature), its record keeps the binary and launch options: a warm start
    loads it as a ``StoredKernel``, without Triton or Triton's cache."""
    from torchkiln_inductor.codegen import cuda_launch
    from torchkiln_inductor.codegen.triton_compile_worker import _triton_builds_launchers

    if not _triton_builds_launchers():
        pytest.skip("needs Triton <= 3.6 (its kernels launch directly): run with .triton36")
    module = generated_module(tmp_path)
    record, binary, _ = jit_compile(module)
    triton_binaries.remember(key(module), record)
    shutil.rmtree(sm90)  # Triton's cache: not read
    stored = triton_binaries.load(key(module))
    assert isinstance(stored, cuda_launch.StoredKernel) and triton_binaries.was_loaded(stored)
    assert hashlib.sha256(stored.kernel).hexdigest() == binary
    assert (stored.name, stored.metadata.num_warps, stored.metadata.shared) == ("scale", 4, 0)
    assert stored.src.signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "XBLOCK": "constexpr"}


def test_each_part_of_a_compile_keys_its_own_record(sm90, tmp_path):
    module = generated_module(tmp_path)
    triton_binaries.remember(key(module), jit_compile(module)[0])
    assert triton_binaries.load(key(module)) is not None
    assert triton_binaries.load(key(module, warps=8)) is None
    assert triton_binaries.load(key(module, aligned=(True, False))) is None
    assert triton_binaries.load(key(module, dtypes=(torch.float16, torch.float32))) is None
    other = triton_binaries.key_of(
        module.scale.fn.__code__.co_filename, "scale", (torch.float32,) * 2, (True, True),
        {"XBLOCK": 128}, 4, None, arch=80,
    )  # fmt: skip
    assert triton_binaries.load(other) is None


def test_a_module_not_named_by_its_source_has_no_key(tmp_path):
    assert (
        triton_binaries.key_of(str(tmp_path / "kernels.py"), "scale", (), (), {}, 4, None, 90)
        is None
    )


def test_a_record_whose_binary_left_tritons_cache_is_not_loaded(sm90, tmp_path):
    module = generated_module(tmp_path)
    triton_binaries.remember(key(module), jit_compile(module)[0])
    shutil.rmtree(sm90)
    assert triton_binaries.load(key(module), through_triton=True) is None


def test_worker_compiles_are_recorded_for_this_process(sm90, tmp_path):
    """The parent records each job a worker (or a thread here) compiled: a launcher then
    finds the binary by torchkiln's key even where its Triton key would differ."""
    module = generated_module(tmp_path)
    jobs = [
        triton_workers.compile_job(
            module.scale, (torch.float32,) * 2, (4,), {"XBLOCK": 128}, w, None
        )
        for w in (2, 4, 8)
    ]
    before = counters["triton_binaries"]["recorded"]
    triton_workers.precompile(jobs)
    assert counters["triton_binaries"]["recorded"] == before + 3
    for warps in (2, 4, 8):
        loaded = triton_binaries.load(key(module, warps=warps), through_triton=True)
        assert loaded is not None and loaded.hash == jit_compile(module, warps)[0]["hash"]


def test_a_launcher_finds_what_the_workers_compiled(sm90, tmp_path):
    """The launcher's key for aligned tensors is the key the parent recorded a worker's
    compile under: it takes the recorded binary (``start_stored``), no compile."""
    from torchkiln_inductor.codegen.triton_launch import LeanLauncher

    module = generated_module(tmp_path)
    precompile_jobs = [
        triton_workers.compile_job(
            module.scale, (torch.float32,) * 2, (4,), {"XBLOCK": 128}, 4, None
        ),
        triton_workers.compile_job(
            module.scale, (torch.float32,) * 2, (4,), {"XBLOCK": 128}, 8, None
        ),
    ]
    triton_workers.precompile(precompile_jobs)
    launcher = LeanLauncher(module.scale, (4,), {"XBLOCK": 128}, num_warps=4)
    tensors = (torch.empty(512), torch.empty(512))  # torch allocates 16-byte aligned
    assert launcher.start_stored(tensors)
    (started,) = launcher._started.values()
    assert triton_binaries.was_loaded(started)
    assert hashlib.sha256(started.kernel).hexdigest() == jit_compile(module, 4)[1]


CHECKED_KERNELS = (
    KERNELS
    + """

@triton.jit(debug=True)
def checked(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.device_assert(offsets >= 0)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets))
"""
)


def test_an_unimported_kernel_keys_its_binary_as_the_imported_one(sm90, tmp_path):
    """A graph from the plan cache binds launchers to its kernels before importing their
    module (``KernelModule``): each launcher's key and compile options are the ones the
    imported ``@triton.jit`` function gives, and the module is imported only when a launcher
    must compile."""
    from torchkiln_inductor.codegen.triton_launch import LeanLauncher
    from torchkiln_inductor.codegen.triton_module import KernelModule

    path = tmp_path / "kiln_0123456789abcdef01234567.py"
    path.write_text(CHECKED_KERNELS)
    lazy = KernelModule(path, CHECKED_KERNELS)
    tensors = (torch.empty(8), torch.empty(8))
    aligned = (True, True)
    for name in ("scale", "checked"):
        launcher = LeanLauncher(getattr(lazy, name), (1,), {"XBLOCK": 8}, 4)
        imported = LeanLauncher(getattr(lazy.imported(), name), (1,), {"XBLOCK": 8}, 4)
        assert launcher._key(aligned, tensors) == imported._key(aligned, tensors) is not None
        assert launcher._options == imported._options
    assert LeanLauncher(lazy.checked, (1,), {"XBLOCK": 8}, 4)._options["sanitize_overflow"] is False
    with pytest.raises(AttributeError, match="no kernel 'missing'"):
        getattr(lazy, "missing")  # noqa: B009  (the attribute access under test)


def test_an_unimported_kernel_imports_its_module_for_what_it_does_not_know(tmp_path):
    from torchkiln_inductor.codegen.triton_module import KernelModule

    path = tmp_path / "kiln_0123456789abcdef01234567.py"
    path.write_text(KERNELS)
    lazy = KernelModule(path, KERNELS)
    kernel = lazy.scale
    assert lazy._module is None
    assert kernel.arg_names == ["x_ptr", "y_ptr", "XBLOCK"]  # the JITFunction's
    assert lazy._module is not None
