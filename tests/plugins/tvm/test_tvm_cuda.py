"""The tvm backend on a CUDA GPU (run on the GPU machine; skipped elsewhere): dlight's
schedules, torch's cuBLAS matmuls, the caller's stream, and MetaSchedule tuning."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchkiln

pytest.importorskip("tvm", reason="the tvm backend needs apache-tvm: pip install 'torchkiln[tvm]'")
import tvm

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
try:
    tvm_sees_gpu = tvm.cuda(0).exist
except Exception:  # TVM's CUDA runtime did not load (libcudart.so.13)
    tvm_sees_gpu = False
if not tvm_sees_gpu:
    pytest.skip("TVM's CUDA runtime sees no GPU (needs libcudart.so.13)", allow_module_level=True)

TOLERANCE = {torch.float32: {}, torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2}}


def chain(x, w, b):
    y = F.gelu(x * w + b)
    return torch.softmax(F.layer_norm(y, y.shape[-1:]), dim=-1)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.down(F.gelu(self.up(x))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_chain_and_an_mlp_block_match_eager(dtype):
    x, w, b = (torch.randn(*s, device="cuda", dtype=dtype) for s in ((512, 1024), (1024,), (1024,)))
    compiled = torchkiln.compile(chain, backend="tvm", fullgraph=True)
    torch.testing.assert_close(compiled(x, w, b), chain(x, w, b), **TOLERANCE[dtype])
    block = Block(256).to("cuda", dtype).eval()
    h = torch.randn(64, 256, device="cuda", dtype=dtype)
    with torch.no_grad():
        torch.testing.assert_close(
            torchkiln.compile(block, backend="tvm")(h), block(h), **TOLERANCE[dtype]
        )


def test_kernels_run_on_the_caller_s_stream():
    """The input is written on a side stream by a long matmul chain: run on another
    stream, the compiled graph would read it before it is ready."""
    compiled = torchkiln.compile(chain, backend="tvm", fullgraph=True)
    w, b = torch.randn(2048, device="cuda"), torch.randn(2048, device="cuda")
    a = torch.randn(2048, 2048, device="cuda")
    compiled(a, w, b)  # compile outside the stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(5):
            x = a.clone()
            for _ in range(20):
                x = torch.tanh(x @ a) * 0.01
            out = compiled(x, w, b)
            expected = chain(x, w, b)
            torch.testing.assert_close(out, expected)
    torch.cuda.synchronize()


def test_max_autotune_tunes_cuda_kernels(tmp_path):
    counters = torchkiln.counters["tvm"]
    before = counters["tuning_trials"]
    compiled = torchkiln.compile(
        chain,
        backend="tvm",
        options={"tuning_trials": 8, "tuning_time_budget_s": 60, "cache_dir": str(tmp_path)},
    )
    x, w, b = (torch.randn(*s, device="cuda") for s in ((256, 512), (512,), (512,)))
    torch.testing.assert_close(compiled(x, w, b), chain(x, w, b))
    assert counters["tuning_trials"] > before
