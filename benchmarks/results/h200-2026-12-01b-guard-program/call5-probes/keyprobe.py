"""Does torch.compile change the cache key Triton computes in this process for a kernel?
Compiles one kernel with real tensors and with dtype names (as kiln's workers do), before
and after torch.compile ran, and prints the backend hash, the specialization keys and the
compiled kernels' hashes."""

import importlib.util
import os
import tempfile
from pathlib import Path

import torch
from triton.runtime import driver

SRC = """
import triton
import triton.language as tl

@triton.jit
def add_one(x_ptr, y_ptr, n, XBLOCK: tl.constexpr):
    offs = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1, mask=m)
"""
path = os.path.join(tempfile.mkdtemp(), "probe_kernel.py")
Path(path).write_text(SRC)


def fresh_fn():
    spec = importlib.util.spec_from_file_location("probe_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.add_one


def state(tag):
    from triton.compiler.compiler import make_backend

    try:
        from triton.compiler.compiler import triton_key
    except ImportError:
        from triton.runtime.cache import triton_key
    target = driver.active.get_current_target()
    backend = make_backend(target)
    x = torch.zeros(1024, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    fn = fresh_fn()
    k1 = fn.warmup(x, y, 1024, grid=(8,), XBLOCK=128, num_warps=4)
    fn2 = fresh_fn()
    k2 = fn2.warmup(torch.bfloat16, torch.bfloat16, 1024, grid=(8,), XBLOCK=128, num_warps=4)
    keys1 = (
        [list(c[0].keys()) for c in fn.device_caches.values()]
        if hasattr(fn, "device_caches")
        else None
    )
    keys2 = (
        [list(c[0].keys()) for c in fn2.device_caches.values()]
        if hasattr(fn2, "device_caches")
        else None
    )
    print(tag, "backend.hash", backend.hash()[:80], "triton_key", triton_key()[-16:])
    print(tag, "tensor-args kernel hash", k1.hash, "dtype-args kernel hash", k2.hash)
    print(tag, "spec keys tensors", keys1)
    print(tag, "spec keys dtypes ", keys2)
    from triton import knobs

    print(tag, "ptxas", knobs.nvidia.ptxas.path, knobs.nvidia.ptxas.version)
    try:
        pass
    except Exception:
        pass
    try:
        from triton.runtime.cache import get_cache_invalidating_env_vars as g2

        print(tag, "invalidating env", g2())
    except Exception as e:
        print(tag, "invalidating env n/a", e)


state("before")
f = torch.compile(lambda a: (a * 2).relu())
f(torch.ones(64, device="cuda"))
state("after")
