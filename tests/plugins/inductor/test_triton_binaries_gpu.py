"""On a GPU, a second process loads every kernel of a compiled graph by torchkiln's key
(``codegen/triton_binaries``), none through Triton's JIT, and computes eager's results, even
where its environment gives Triton another key than the first process had (torch.compile
sets ``TRITON_PTXAS_PATH`` to torch's own ``ptxas``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

STEP = """
import json, torch, torchkiln
from torchkiln import counters
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256), torch.nn.Linear(256, 8)
).cuda()
x = torch.randn(32, 64, device="cuda", requires_grad=True)
compiled = torchkiln.compile(model)
out = compiled(x).softmax(-1)
out.sum().backward()
expected = model(x).softmax(-1)
torch.testing.assert_close(out, expected)
print(json.dumps(dict(counters["triton_binaries"])))
"""


def run_step(cache: Path, **env) -> dict:
    environ = dict(
        os.environ,
        TORCHKILN_CACHE_DIR=str(cache / "kiln"),
        TRITON_CACHE_DIR=str(cache / "triton"),
        **env,
    )
    environ.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-c", STEP]
    done = subprocess.run(command, env=environ, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


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
