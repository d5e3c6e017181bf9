"""Triton kernels compiled in worker processes fill Triton's disk cache, so this process's
compile of the same kernel only loads it (``codegen/triton_workers``).

No GPU is needed: the workers and this test compile for an H100's target (``sm90``)
through the compile-only driver; Triton's wheel carries ``ptxas``.
"""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

triton = pytest.importorskip("triton", reason="needs triton")
pytest.importorskip("triton.backends.nvidia", reason="needs Triton's NVIDIA backend")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402

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
def broken(x_ptr, XBLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, XBLOCK), undefined_name)
"""


@pytest.fixture
def sm90(tmp_path, monkeypatch):
    """An H100's target in this process too, compiled kernels (not interpreted), a fresh
    Triton cache, and the workers stopped after."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # compile: the test suite interprets
    driver.set_active(triton_workers.CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
    yield tmp_path / "triton"
    driver._active = None  # the real driver again, on next use
    for worker in triton_workers._pool or []:
        worker.close()
    triton_workers._pool, triton_workers._stopped = None, False


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


#: This process's side, in a process of its own: the test suite imported Triton's language
#: to interpret it (``TRITON_INTERPRET=1``), so nothing compiles here.
LAUNCHER_SIDE = """
import importlib.util, sys, torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from torchkiln_inductor.codegen.triton_workers import CompileOnlyDriver
driver.set_active(CompileOnlyDriver(GPUTarget("cuda", 90, 32)))
spec = importlib.util.spec_from_file_location("kiln_kernels", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
for warps in map(int, sys.argv[2:]):
    module.add_one.warmup(torch.float32, torch.float32, grid=(4,), num_warps=warps, XBLOCK=128)
"""


def compile_as_a_launcher(module, *warps):
    path = module.__file__
    done = subprocess.run([sys.executable, "-c", LAUNCHER_SIDE, path, *map(str, warps)])
    assert done.returncode == 0


def test_worker_compiles_are_loaded_not_recompiled(sm90, tmp_path):
    module = kernels(tmp_path)
    before = counters["triton_workers"]["compiled"]
    triton_workers.precompile([job(module.add_one, warps) for warps in (2, 4, 8)])
    assert counters["triton_workers"]["compiled"] == before + 3
    filled = entries(sm90)
    assert filled > 0
    compile_as_a_launcher(module, 2, 4, 8)  # found in the cache: nothing new written
    assert entries(sm90) == filled
    compile_as_a_launcher(module, 1)  # a config no worker compiled: the check above can fail
    assert entries(sm90) > filled


def test_a_failed_worker_compile_is_counted_not_raised(sm90, tmp_path):
    module = kernels(tmp_path)
    before = counters["triton_workers"]["failed"]
    bad = triton_workers.compile_job(module.broken, (torch.float32,), (1,), {"XBLOCK": 16}, 4, None)
    triton_workers.precompile([bad, job(module.add_one, 4)])
    assert counters["triton_workers"]["failed"] == before + 1
