"""What bounds the chain's fused row kernel on the GPU: ablations, warps, rows per program.

    python benchmarks/results/h200-2026-11-29h/chain_ablation.py

The kernel is the one torchkiln's inductor generates for softmax(layer_norm(gelu(x*w+b)))
(one program per row, the row in registers, x read once and the result written once),
written out by hand so that its stages can be cut off: load+store alone, then each op
added. Timed with ``triton.testing.do_bench`` against a ``copy_`` of the same bytes.
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench


@triton.jit
def nan_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def row_kernel(
    x_ptr, w_ptr, b_ptr, o_ptr, N: tl.constexpr, XBLOCK: tl.constexpr, STAGE: tl.constexpr
):
    rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    cols = tl.arange(0, N)[None, :]
    v = tl.load(x_ptr + (cols + N * rows)).to(tl.float32)
    if STAGE >= 1:
        v = v * tl.load(w_ptr + cols).to(tl.float32) + tl.load(b_ptr + cols).to(tl.float32)
    if STAGE >= 2:
        v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    if STAGE >= 3:
        mean = tl.sum(v, 1)[:, None] / N
        d = v - mean
        var = tl.sum(d * d, 1)[:, None] / N
        v = (d * tl.rsqrt(var + 1e-5)).to(tl.bfloat16).to(tl.float32)
    if STAGE >= 4:
        e = tl.exp(v - tl.reduce(v, 1, nan_max)[:, None])
        v = e * (1.0 / tl.sum(e, 1)[:, None])
    tl.store(o_ptr + (cols + N * rows), v.to(tl.bfloat16))


def sweep(rows: int, width: int) -> None:
    """Each stage with 8 warps, then the whole chain at each warps / rows-per-program pair."""
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    w, b = (torch.randn(width, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out, copy_dst = torch.empty_like(x), torch.empty_like(x)
    copy_ms = do_bench(lambda: copy_dst.copy_(x), warmup=50, rep=300)
    print(f"== {rows}x{width}: copy {copy_ms * 1e3:.1f} us")

    def report(name: str, stage: int, warps: int, xblock: int) -> None:
        meta = dict(N=width, XBLOCK=xblock, STAGE=stage, num_warps=warps)
        ms = do_bench(
            lambda: row_kernel[(rows // xblock,)](x, w, b, out, **meta), warmup=50, rep=300
        )
        regs = row_kernel.warmup(x, w, b, out, grid=(1,), **meta).n_regs
        print(f"{name:24s} {ms * 1e3:7.1f} us {copy_ms / ms * 100:5.1f}% of copy, {regs} registers")

    for stage, what in enumerate(
        ["load+store", "+ x*w+b", "+ gelu (erf)", "+ layer_norm", "+ softmax"]
    ):
        report(f"{what} w8 x1", stage, 8, 1)
    for warps in (2, 4, 8, 16):
        for xblock in (1, 2, 4):
            if xblock * width <= 16384:
                report(f"all w{warps} x{xblock}", 4, warps, xblock)


if __name__ == "__main__":
    sweep(32768, 4096)
    sweep(131072, 1024)
