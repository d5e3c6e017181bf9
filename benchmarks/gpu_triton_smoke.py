"""GPU smoke test of the inductor backend's Triton kernels: correctness and a rough time.

Run on a CUDA machine: ``python benchmarks/gpu_triton_smoke.py``. For a pointwise chain,
the ``softmax(layer_norm(gelu(x*w+b)))`` chain and an MLP training step, prints the
largest difference from eager and the warm milliseconds per call of both (CUDA events,
median of 50); a bfloat16 result is judged by its distance from float32's. Then
the warm per-call cost of a compiled ``x + 1`` on a small tensor beside eager's (wall
clock, median of 20 batches of 200 calls). Exits non-zero if an output is outside
tolerance.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torchkiln


def _ms(fn, *args) -> float:
    for _ in range(5):
        fn(*args)
    times = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _max_diff(a, b) -> float:
    flat_a = [a] if isinstance(a, torch.Tensor) else list(a)
    flat_b = [b] if isinstance(b, torch.Tensor) else list(b)
    return max((x.float() - y.float()).abs().max().item() for x, y in zip(flat_a, flat_b))


def pointwise(x, y):
    return torch.relu(x * y + 1).sigmoid() - x.t().contiguous().t() / 3


def chain(x, w, b):
    return torch.softmax(F.layer_norm(F.gelu(x * w + b), x.shape[-1:]), -1)


def _check(fn, compiled, args, tol) -> tuple[bool, str]:
    """Whether the compiled result is close enough, and what was compared. In float32: within
    ``tol`` of eager. In low precision: no further from float32's result than ``tol``
    times eager's own distance from it (two correct bfloat16 programs differ by as much)."""
    diff = _max_diff(compiled(*args), fn(*args))
    if all(a.dtype == torch.float32 for a in args):
        return diff <= tol, f"max diff {diff:.2e}"
    reference = fn(*(a.float() for a in args))
    ours, eager = _max_diff(compiled(*args), reference), _max_diff(fn(*args), reference)
    text = f"max diff {diff:.2e}, from float32: inductor {ours:.2e}, eager {eager:.2e}"
    return ours <= tol * eager, text


def _call_us(fn, *args) -> float:
    """Warm wall-clock microseconds per call, launch cost included."""
    samples = []
    for _ in range(20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(200):
            fn(*args)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / 200 * 1e6)
    return statistics.median(samples)


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    dev, failed = "cuda", False
    x, y = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
    xb = torch.randn(8192, 1024, device=dev, dtype=torch.bfloat16)
    wb = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    bb = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    cases = [
        ("pointwise f32", pointwise, (x, y), 1e-5),
        ("ln chain bf16", chain, (xb, wb, bb), 2.0),
    ]
    for name, fn, args, tol in cases:
        compiled = torchkiln.compile(fn, backend="inductor")
        ok, compared = _check(fn, compiled, args, tol)
        failed |= not ok
        print(
            f"{name:16s} {compared}  eager {_ms(fn, *args):.3f} ms  "
            f"inductor {_ms(compiled, *args):.3f} ms"
        )

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096),
        torch.nn.GELU(),
        torch.nn.LayerNorm(4096),
        torch.nn.Linear(4096, 1024),
    ).to(dev)
    data, target = torch.randn(512, 1024, device=dev), torch.randn(512, 1024, device=dev)

    def step(m):
        loss = F.mse_loss(m(data), target)
        loss.backward()
        return loss

    expected = step(model)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    compiled = torchkiln.compile(model, backend="inductor")
    actual = step(compiled)
    diff = max(
        _max_diff(actual, expected),
        *(_max_diff(p.grad, g) for p, g in zip(model.parameters(), grads)),
    )
    failed |= diff > 1e-4
    print(
        f"{'mlp train f32':16s} max diff {diff:.2e}  eager {_ms(step, model):.3f} ms  "
        f"inductor {_ms(step, compiled):.3f} ms"
    )
    small = torch.randn(64, device=dev)
    add_one = torchkiln.compile(lambda t: t + 1, backend="inductor")
    add_one(small)
    print(
        f"{'x + 1 per call':16s} eager {_call_us(torch.add, small, 1):.1f} us  "
        f"inductor {_call_us(add_one, small):.1f} us"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
