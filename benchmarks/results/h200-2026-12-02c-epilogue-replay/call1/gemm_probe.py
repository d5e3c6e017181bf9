"""Probe: where a GEMM's fused GELU epilogue loses its time, and whether a persistent kernel
(epilogue overlapped with the next tile's loads) wins. bf16, addmm(bias) + act."""

import os
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

#: the interpreter (a syntax check on CPU) computes float16; the H200 bfloat16
DT = torch.float16 if os.environ.get("TRITON_INTERPRET") else torch.bfloat16
DEV = "cuda" if torch.cuda.is_available() else "cpu"
NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 4


OUT_DT = tl.constexpr(tl.bfloat16 if DT is torch.bfloat16 else tl.float16)


@triton.jit
def _epilogue(acc, bias, ACT: tl.constexpr):
    y = (acc + bias[None, :]).to(OUT_DT).to(tl.float32)
    if ACT == 1:
        y = tl.maximum(y, 0.0)
    if ACT == 2:
        y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    if ACT == 3:
        y = y * 0.5 * (1.0 + tl.erf(y * 0.7071067811865476))
    return y.to(OUT_DT)


@triton.jit
def plain_kernel(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GM: tl.constexpr,
    ACT: tl.constexpr,
):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    group = GM * grid_n
    first_m = (pid // group) * GM
    rows = tl.minimum(grid_m - first_m, GM)
    pid_m = first_m + (pid % group) % rows
    pid_n = (pid % group) // rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + (rm % M)[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + (rn % N)[None, :]
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for _ in range(0, K, BK):
        acc += tl.dot(tl.load(a_ptrs), tl.load(b_ptrs))
        a_ptrs += BK
        b_ptrs += BK * N
    bias = tl.load(bias_ptr + rn).to(tl.float32)
    y = _epilogue(acc, bias, ACT)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], y, (rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def persistent_kernel(
    a_ptr,
    b_ptr,
    bias_ptr,
    c_ptr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GM: tl.constexpr,
    ACT: tl.constexpr,
    SMS: tl.constexpr,
    STAGES: tl.constexpr,
):
    start = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    tiles = grid_m * grid_n
    group = GM * grid_n
    rk = tl.arange(0, BK)
    for tile in tl.range(start, tiles, SMS, flatten=True, num_stages=STAGES):
        first_m = (tile // group) * GM
        rows = tl.minimum(grid_m - first_m, GM)
        pid_m = first_m + (tile % group) % rows
        pid_n = (tile % group) // rows
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + (rm % M)[:, None] * K + (k0 + rk)[None, :])
            b = tl.load(b_ptr + (k0 + rk)[:, None] * N + (rn % N)[None, :])
            acc = tl.dot(a, b, acc)
        bias = tl.load(bias_ptr + rn).to(tl.float32)
        y = _epilogue(acc, bias, ACT)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], y, (rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def tma_kernel(
    a_ptr,
    bt_ptr,
    bias_ptr,
    c_ptr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GM: tl.constexpr,
    ACT: tl.constexpr,
    SMS: tl.constexpr,
    STAGES: tl.constexpr,
    SUBTILE: tl.constexpr,
):
    start = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    tiles = grid_m * grid_n
    group = GM * grid_n
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(bt_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    if SUBTILE:
        c_desc = tl.make_tensor_descriptor(
            c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN // 2]
        )
    else:
        c_desc = tl.make_tensor_descriptor(
            c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN]
        )
    for tile in tl.range(start, tiles, SMS, flatten=True, num_stages=STAGES):
        first_m = (tile // group) * GM
        rows = tl.minimum(grid_m - first_m, GM)
        pid_m = first_m + (tile % group) % rows
        pid_n = (tile % group) // rows
        om = pid_m * BM
        on = pid_n * BN
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k0 in range(0, K, BK):
            acc = tl.dot(a_desc.load([om, k0]), b_desc.load([k0, on]), acc)
        rn = on + tl.arange(0, BN)
        bias = tl.load(bias_ptr + rn).to(tl.float32)
        if SUBTILE:
            acc3 = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
            acc0, acc1 = tl.split(acc3)
            b3 = tl.permute(tl.reshape(bias, (2, BN // 2)), (1, 0))
            b0, b1 = tl.split(b3)
            c_desc.store([om, on], _epilogue(acc0, b0, ACT))
            c_desc.store([om, on + BN // 2], _epilogue(acc1, b1, ACT))
        else:
            c_desc.store([om, on], _epilogue(acc, bias, ACT))


def bench(fn):
    if DEV == "cpu":
        return 1.0
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1000


#: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
CONFIGS = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 4)]


def variants(a, w, bias, c, act):
    """(label, launch) of each kernel style in each config."""
    (M, K), N = a.shape, w.shape[1]
    out = []
    for bm, bn, bk, st, wp in CONFIGS:
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        grid = min(NUM_SMS, tiles)
        shape = f"{bm}x{bn}x{bk} s{st} w{wp}"
        common = (a, w, bias, c, M, N, K, bm, bn, bk, 8, act)

        def plain(common=common, tiles=tiles, st=st, wp=wp):
            plain_kernel[(tiles,)](*common, num_warps=wp, num_stages=st)

        def persistent(common=common, grid=grid, st=st, wp=wp):
            persistent_kernel[(grid,)](*common, NUM_SMS, st, num_warps=wp)

        out += [(f"plain {shape}", plain), (f"persistent {shape}", persistent)]
        for sub in (0, 1):

            def tma(common=common, grid=grid, st=st, wp=wp, sub=sub):
                tma_kernel[(grid,)](*common, NUM_SMS, st, sub, num_warps=wp)

            out.append((f"tma sub{sub} {shape}", tma))
    return out


def main():
    torch.manual_seed(0)
    triton.set_allocator(
        lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=DEV)
    )
    shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[1].split(",")]
    acts = {0: ("none", lambda y: y), 1: ("relu", F.relu), 2: ("gelu", F.gelu)}
    for M, N, K in shapes:
        a = torch.randn(M, K, device=DEV, dtype=DT)
        w = torch.randn(K, N, device=DEV, dtype=DT) / K**0.5
        bias = torch.randn(N, device=DEV, dtype=DT)
        c = torch.empty(M, N, device=DEV, dtype=DT)
        for act, (name, f) in acts.items():
            ref = f(torch.addmm(bias, a, w))
            base = bench(lambda f=f, a=a, w=w, bias=bias: f(torch.addmm(bias, a, w)))
            print(f"{M}x{N}x{K} {name:5s} cublas+kernel {base:7.1f}us", flush=True)
            for label, run in variants(a, w, bias, c, act):
                try:
                    c.zero_()
                    run()
                    err = (c.float() - ref.float()).abs().max().item()
                    t = bench(run)
                    print(f"    {label:32s} {t:7.1f}us {100 * base / t:5.1f}% max|diff| {err:.3g}")
                except Exception as e:  # a config that does not fit
                    print(f"    {label:32s} failed: {type(e).__name__}: {str(e)[:120]}")


main()
