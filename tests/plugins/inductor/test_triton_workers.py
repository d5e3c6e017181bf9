"""Triton kernels compiled in worker processes fill Triton's disk cache, so this process's
compile of the same kernel only loads it (``codegen/triton_workers``).

No GPU is needed: the workers and this test compile for an H100's target (``sm90``)
through the compile-only driver; Triton's wheel carries ``ptxas``.
"""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import threading

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs triton")
pytest.importorskip("triton.backends.nvidia", reason="needs Triton's NVIDIA backend")

from torchkiln import counters  # noqa: E402
from torchkiln_inductor.codegen import triton_workers  # noqa: E402

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, y_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets) + 1.0)


@triton.jit
def mixed(x_ptr, i_ptr, m_ptr, y_ptr, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    v = tl.load(x_ptr + offsets).to(tl.float32) + tl.load(i_ptr + offsets).to(tl.float32)
    tl.store(y_ptr + offsets, tl.where(tl.load(m_ptr + offsets), v, 0.0).to(tl.bfloat16))


@triton.jit
def broken(x_ptr, XBLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, XBLOCK), undefined_name)
"""


def kernels(tmp_path):
    path = tmp_path / "kiln_kernels.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entries(cache) -> int:
    return sum(len(files) for _, _, files in os.walk(cache))


def job(fn, warps):
    return triton_workers.compile_job(
        fn, (torch.float32, torch.float32), (4,), {"XBLOCK": 128}, warps, None
    )


#: This process's side, in a process of its own (see ``sm90``).
LAUNCHER_SIDE = """
import importlib.util, sys, torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver
driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
spec = importlib.util.spec_from_file_location("kiln_kernels", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
mixed = sys.argv[2] == "mixed"
for warps in map(int, sys.argv[3:]):
    module.add_one.warmup(torch.float32, torch.float32, grid=(4,), num_warps=warps, XBLOCK=128)
    if mixed:
        dtypes = (torch.bfloat16, torch.int64, torch.bool, torch.bfloat16)
        module.mixed.warmup(*dtypes, grid=(4,), num_warps=warps, XBLOCK=128)
"""


def compile_as_a_launcher(module, *warps, mixed=False):
    """Compile ``add_one`` (and ``mixed``) as a launcher does, in a process that compiles
    (``TRITON_INTERPRET`` unset), into the ``TRITON_CACHE_DIR`` of this process."""
    path = module.__file__
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    command = [sys.executable, "-c", LAUNCHER_SIDE, path, "mixed" if mixed else "plain"]
    done = subprocess.run(command + [str(w) for w in warps], env=env)
    assert done.returncode == 0


def mixed_job(fn, warps):
    dtypes = (torch.bfloat16, torch.int64, torch.bool, torch.bfloat16)
    return triton_workers.compile_job(fn, dtypes, (4,), {"XBLOCK": 128}, warps, None)


def test_worker_compiles_are_loaded_not_recompiled(sm90, tmp_path):
    """Workers compile without torch (dtypes by name): the launcher, with torch's dtypes,
    computes the same cache keys."""
    module = kernels(tmp_path)
    before = counters["triton_workers"]["compiled"]
    jobs = [job(module.add_one, warps) for warps in (2, 4, 8)]
    triton_workers.precompile(jobs + [mixed_job(module.mixed, warps) for warps in (2, 4, 8)])
    assert counters["triton_workers"]["compiled"] == before + 6
    filled = entries(sm90)
    assert filled > 0
    compile_as_a_launcher(module, 2, 4, 8, mixed=True)  # found in the cache: nothing new
    assert entries(sm90) == filled
    compile_as_a_launcher(module, 1)  # a config no worker compiled: the check above can fail
    assert entries(sm90) > filled


def test_a_failed_worker_compile_is_counted_not_raised(sm90, tmp_path):
    module = kernels(tmp_path)
    before = counters["triton_workers"]["failed"]
    bad = triton_workers.compile_job(module.broken, (torch.float32,), (1,), {"XBLOCK": 16}, 4, None)
    triton_workers.precompile([bad, job(module.add_one, 4)])
    assert counters["triton_workers"]["failed"] == before + 1


def test_a_worker_never_imports_torch(sm90, tmp_path):
    """Its start would take seconds (Triton 3.6 imports torch unless the import fails): a
    kernel module that imports torch fails in a worker, a plain one compiles."""
    module = kernels(tmp_path)
    path = tmp_path / "kiln_needs_torch.py"
    path.write_text("import torch\n" + KERNELS)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    needs_torch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(needs_torch)
    before = dict(counters["triton_workers"])
    triton_workers.precompile([job(needs_torch.add_one, 4), job(module.add_one, 4)])
    assert counters["triton_workers"]["failed"] == before.get("failed", 0) + 1
    assert counters["triton_workers"]["compiled"] == before.get("compiled", 0) + 1


#: ``precompile`` in a process that compiles too (not interpreted), as on the GPU machine:
#: it takes jobs from the start, while the zygote starts, and alongside the workers
SELF_AND_WORKERS = """
import importlib.util, json, sys, torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from torchkiln import counters
from torchkiln_inductor.codegen import triton_workers
from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver
driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
spec = importlib.util.spec_from_file_location("kiln_kernels", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
jobs = [
    triton_workers.compile_job(
        module.add_one, (torch.float32, torch.float32), (4,), {"XBLOCK": block}, warps, None
    )
    for block in (64, 128, 256) for warps in (1, 2, 4, 8)
]
triton_workers.precompile(jobs)
print(json.dumps(dict(counters["triton_workers"])))
"""


def test_this_process_compiles_alongside_the_workers(tmp_path):
    """Every job compiles, here or in a worker, into the cache a launcher then loads from."""
    module = kernels(tmp_path)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"))
    env.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-c", SELF_AND_WORKERS, module.__file__]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    counted = json.loads(done.stdout.splitlines()[-1])
    assert counted["compiled"] == 12 and counted["failed"] == 0
    assert 0 < counted["compiled_here"] <= 12
    filled = entries(tmp_path / "triton")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
        compile_as_a_launcher(module, 1, 2, 4, 8)  # XBLOCK=128: found, nothing new written
    assert entries(tmp_path / "triton") == filled


def test_warm_pool_sets_tritons_driver_up_once_on_a_thread_of_its_own(monkeypatch):
    ran_on = []
    monkeypatch.setattr(triton_workers, "_started_pool", lambda: None)
    monkeypatch.setattr(triton_workers, "_driver_set_up", None)
    monkeypatch.setattr(
        triton_workers, "_set_up_driver", lambda: ran_on.append(threading.current_thread().name)
    )
    triton_workers.warm_pool()
    triton_workers.warm_pool()
    triton_workers._driver_set_up.join()
    assert ran_on == ["torchkiln-triton-driver"]


def test_a_driver_that_cant_be_set_up_is_left_to_the_first_compile(monkeypatch):
    drivers = importlib.import_module("triton.runtime.driver")  # the module, not its object

    def no_driver():
        raise RuntimeError("0 active drivers ([]). There should only be one.")

    monkeypatch.setattr(drivers.driver, "_active", None)
    monkeypatch.setattr(drivers.driver, "_default", None)
    monkeypatch.setattr(drivers, "_create_driver", no_driver)
    triton_workers._set_up_driver()  # raises nothing: the first compile meets the error
    with pytest.raises(RuntimeError, match="0 active drivers"):
        drivers.driver.active.get_current_target()


def test_the_workers_target_comes_from_a_driver_set_up_else_from_torch(monkeypatch):
    from triton.backends.compiler import GPUTarget

    from torchkiln_inductor.codegen import triton_binaries
    from torchkiln_inductor.codegen.triton_compile_worker import CompileOnlyDriver

    drivers = importlib.import_module("triton.runtime.driver")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (8, 0))
    monkeypatch.setattr(drivers.driver, "_active", None)
    assert triton_binaries.current_target() == ("cuda", 80, 32)  # no gcc build for this
    monkeypatch.setattr(drivers.driver, "_active", CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    assert triton_binaries.current_target() == ("cuda", 90, 32)


def test_the_number_of_compiling_processes_comes_from_the_environment(monkeypatch):
    monkeypatch.setattr(triton_workers, "usable_cores", lambda: 64)
    monkeypatch.delenv(triton_workers.WORKERS_ENV, raising=False)
    assert triton_workers._compiling_processes() == triton_workers.MAX_WORKERS
    monkeypatch.setattr(triton_workers, "usable_cores", lambda: 4)
    assert triton_workers._compiling_processes() == 4
    monkeypatch.setenv(triton_workers.WORKERS_ENV, "24")  # more than the cores: as asked
    assert triton_workers._compiling_processes() == 24
    for bad in ("0", "-2", "eight"):
        monkeypatch.setenv(triton_workers.WORKERS_ENV, bad)
        with pytest.raises(ValueError, match="TORCHKILN_COMPILE_WORKERS must be a whole number"):
            triton_workers._compiling_processes()
