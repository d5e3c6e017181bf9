"""Benchmark row: a training step with the min-cut partitioner vs the simple one vs eager.

    python -m benchmarks.aot_partitioners [--json out.json] [--batch 2048] [--hidden 512]

Model: a residual MLP whose blocks are pointwise-heavy (GELU, scale, shift),
trained with ``(out**2).mean()``. Both AOT variants use the default
decompositions and run their graphs with torch.fx (no code generation), so
they differ only in what the forward saves for backward. For each variant:
the bytes of activations saved for backward (parameters excluded), the peak
memory of one forward+backward above the memory in use before it, and the
median step time. Each variant runs in a fresh process with glibc's mmap
threshold pinned so that freed tensors leave the resident set at once and
the peak resident set (VmHWM) measures the step alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.measure import PeakMemory, median, step_times_ms

VARIANTS = ("eager", "aot simple", "aot min-cut")


class PointwiseMLP(nn.Module):
    def __init__(self, hidden: int, blocks: int) -> None:
        super().__init__()
        self.up = nn.ModuleList(nn.Linear(hidden, 4 * hidden) for _ in range(blocks))
        self.down = nn.ModuleList(nn.Linear(4 * hidden, hidden) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for up, down in zip(self.up, self.down):
            h = F.gelu(up(x))
            x = x + down(torch.tanh(h * 1.5 + 0.25) * h)
        return x


def _backend(variant: str) -> Callable | str:
    if variant == "eager":
        return "eager"
    from torchkiln.aot import aot_autograd, default_decompositions, min_cut_partition
    from torchkiln.aot import simple_partition as simple
    from torchkiln.backends.aot import run_as_is

    partition = min_cut_partition if variant == "aot min-cut" else simple
    return aot_autograd(
        fw_compiler=run_as_is, decompositions=default_decompositions(), partition_fn=partition
    )


def _saved_activation_mb(model: nn.Module, step_forward: Callable[[], torch.Tensor]) -> float:
    """MiB of distinct storages autograd keeps for backward, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = step_forward()
    loss.backward()
    return sum(storages.values()) / 2**20


def measure(variant: str, batch: int, hidden: int, blocks: int, reps: int) -> dict:
    """One variant's figures, measured in this process."""
    import torchkiln

    torch.manual_seed(0)
    model = PointwiseMLP(hidden, blocks)
    x = torch.randn(batch, hidden)
    run = model if variant == "eager" else torchkiln.compile(model, backend=_backend(variant))

    def forward() -> torch.Tensor:
        return run(x).pow(2).mean()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        forward().backward()

    step()  # compiles forward and backward
    saved_mb = _saved_activation_mb(model, forward)
    model.zero_grad(set_to_none=True)
    peak = PeakMemory(torch.device("cpu"))
    peak.start()
    forward().backward()
    peak_mb = peak.peak_mb()
    times = step_times_ms(step, torch.device("cpu"), warmup=1, reps=reps, budget_s=60)
    return {
        "variant": variant,
        "saved_for_backward_mb": round(saved_mb, 1),
        "peak_step_mb": None if peak_mb is None else round(peak_mb, 1),
        "median_step_ms": round(median(times), 1),
        "reps": len(times),
    }


def _run_child(variant: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS=str(args.threads))
    cmd = [sys.executable, "-m", "benchmarks.aot_partitioners", "--child", variant]
    cmd += ["--batch", str(args.batch), "--hidden", str(args.hidden)]
    cmd += ["--blocks", str(args.blocks), "--reps", str(args.reps)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return {"variant": variant, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.batch, args.hidden, args.blocks, args.reps)))
        return
    rows = [_run_child(variant, args) for variant in VARIANTS]
    print(
        f"training step of PointwiseMLP(hidden={args.hidden}, blocks={args.blocks}), "
        f"batch {args.batch}, CPU, {args.threads} threads"
    )
    print(f"{'variant':<14}{'saved for bw MiB':>18}{'peak step MiB':>16}{'median ms':>12}")
    for row in rows:
        if "error" in row:
            print(f"{row['variant']:<14}  failed: {row['error']}")
            continue
        peak = "n/a" if row["peak_step_mb"] is None else f"{row['peak_step_mb']:.1f}"
        print(
            f"{row['variant']:<14}{row['saved_for_backward_mb']:>18.1f}{peak:>16}"
            f"{row['median_step_ms']:>12.1f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
