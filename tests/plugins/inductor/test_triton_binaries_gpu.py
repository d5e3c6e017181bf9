"""On a GPU, a second process loads every kernel of a compiled graph by torchkiln's key
(``codegen/triton_binaries``), none through Triton's JIT, and computes eager's results, even
where its environment gives Triton another key than the first process had (torch.compile
sets ``TRITON_PTXAS_PATH`` to torch's own ``ptxas``)."""

from pathlib import Path

import pytest
import torch
from inductor_testing import run_gpu_training_step

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def run_step(cache: Path, **env: str) -> dict[str, int]:
    return run_gpu_training_step(cache, **env)["triton_binaries"]


def test_a_second_process_loads_every_kernel_by_torchkilns_key(tmp_path):
    first = run_step(tmp_path)
    assert first.get("recorded", 0) > 0
    second = run_step(tmp_path)
    assert second.get("through_jit", 0) == 0 and second.get("loaded", 0) > 0


def test_another_ptxas_still_finds_the_recorded_kernels(tmp_path):
    ptxas = Path(torch.__file__).parent / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip("needs torch's own ptxas (torch/bin/ptxas) as a second ptxas")
    first = run_step(tmp_path)
    second = run_step(tmp_path, TRITON_PTXAS_PATH=str(ptxas))
    assert first.get("recorded", 0) > 0
    assert second.get("through_jit", 0) == 0 and second.get("loaded", 0) > 0


def test_a_second_process_launching_every_kernel_directly_never_imports_triton(tmp_path):
    """Where every kernel launches through ``cuda_launch.DirectLaunch`` (Triton 3.6), a warm
    start loads them from their records (``StoredKernel``): Triton's import (0.1 s, its
    ``@jit`` functions reading their sources) is left out of it."""
    first = run_gpu_training_step(tmp_path)
    if first["triton_launch"].get("through_triton", 0):
        pytest.skip("some kernels launch through Triton's launcher with this Triton (3.7+)")
    second = run_gpu_training_step(tmp_path)
    assert second["triton_binaries"].get("loaded", 0) > 0
    assert second["process"]["triton_imported"] == 0
