"""Compile time of N identical blocks, each compiled on its own (issue 14, item 5).

Instances of one module class share compiled work: a block is guarded by its
type and ``training``, its parameters are graph inputs, so N blocks compiled
one by one capture one frame and compile one graph. Each N runs in a child
process with its own empty cache directory (nothing on disk or in memory
from an earlier N); the child times the first call of every block, in order,
from ``torchkiln.compile`` to the result, then the second calls (what running
the blocks costs, compile time aside), and counts captured frames.

    .venv/bin/python -m benchmarks.many_instances                     # N = 1, 4, 24, inductor
    .venv/bin/python -m benchmarks.many_instances --backend aot_eager --counts 1,8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.caches import cache_env


def build_block(d: int):
    """A small transformer-style block: Linear, LayerNorm, GELU, Linear, with a residual."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(d, 4 * d)
            self.norm = nn.LayerNorm(4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.fc2(nn.functional.gelu(self.norm(self.fc1(x))))

    return Block


def child(n: int, backend: str, d: int) -> dict:
    """Compile ``n`` blocks one by one and time their first calls (forward, grad enabled)."""
    import torch

    import torchkiln

    torch.manual_seed(0)
    block = build_block(d)
    blocks = [block() for _ in range(n)]
    x = torch.randn(8, 32, d, requires_grad=True)  # an activation, as every later block gets
    start = time.perf_counter()
    compiled = []
    y = x
    for b in blocks:
        compiled.append(torchkiln.compile(b, backend=backend))
        y = compiled[-1](y)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    y = x
    for c in compiled:
        y = c(y)
    again = time.perf_counter() - start
    counters = torchkiln.counters
    return {
        "n": n,
        "seconds": seconds,
        "again": again,
        "frames": counters["frames"]["total"],
        "eager_fallbacks": sum(counters["eager_fallback"].values()),
    }


def run_child(n: int, backend: str, d: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="many-instances-") as tmp:
        env = {**os.environ, **cache_env(Path(tmp))}
        command = [sys.executable, "-m", "benchmarks.many_instances", "--child", str(n)]
        command += ["--backend", backend, "--d", str(d)]
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--counts", default="1,4,24", help="comma-separated numbers of blocks")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--d", type=int, default=256, help="the blocks' width")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.backend, args.d)))
        return
    print(f"backend {args.backend}, block width {args.d}, input (8, 32, {args.d})")
    print(
        f"{'N':>4}  {'first calls (s)':>15}  {'per block (ms)':>14}  {'second calls (s)':>16}  "
        f"{'frames':>6}  {'eager fallbacks':>15}"
    )
    for n in (int(c) for c in args.counts.split(",")):
        row = run_child(n, args.backend, args.d)
        print(
            f"{n:>4}  {row['seconds']:>15.2f}  {1000 * row['seconds'] / n:>14.1f}  "
            f"{row['again']:>16.2f}  {row['frames']:>6}  {row['eager_fallbacks']:>15}"
        )


if __name__ == "__main__":
    main()
