"""kiln:inductor default against max-autotune-no-cudagraphs in one process, steps alternating.

Both compile the same module (tuning runs at max-autotune's first call; its counters are
printed), then ``ROUNDS`` rounds each time one step of each, the order flipping every round;
the speedup is the median over the rounds of default's step time / max-autotune's. A
training step is forward, ``mean(out**2)`` and backward (no optimizer). One JSON line out.

    PYTHONPATH=. TORCHKILN_CACHE_DIR=$(mktemp -d) \\
        python benchmarks/results/cpu-2026-11-29e-cpp-autotune/ab_steps.py nanogpt training 30
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

import torchkiln
from benchmarks.models import MODELS


def main(name: str, case: str, rounds: int) -> None:
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    built = MODELS[name].build("small")
    model = built.module.eval() if case == "inference" else built.module

    def step(fn) -> None:
        if case == "inference":
            with torch.no_grad():
                fn(*built.inputs)
            return
        out = fn(*built.inputs)
        if not isinstance(out, torch.Tensor):
            out = out[0] if isinstance(out, (tuple, list)) else out.logits
        out.float().pow(2).mean().backward()

    default = torchkiln.compile(model, backend="inductor")
    tuned = torchkiln.compile(model, backend="inductor", mode="max-autotune-no-cudagraphs")
    start = time.perf_counter()
    step(default)
    first_default = time.perf_counter() - start
    start = time.perf_counter()
    step(tuned)
    first_tuned = time.perf_counter() - start
    autotune = dict(torchkiln.counters["autotune"])
    step(default)
    step(tuned)
    times: dict[str, list[float]] = {"default": [], "tuned": []}
    for r in range(rounds):
        pair = [("default", default), ("tuned", tuned)]
        for label, fn in pair if r % 2 == 0 else reversed(pair):
            start = time.perf_counter()
            step(fn)
            times[label].append(time.perf_counter() - start)
    ratios = [d / t for d, t in zip(times["default"], times["tuned"], strict=True)]
    result = {
        "model": name,
        "case": case,
        "default_ms": statistics.median(times["default"]) * 1e3,
        "autotune_ms": statistics.median(times["tuned"]) * 1e3,
        "speedup": statistics.median(ratios),
        "first_default_s": first_default,
        "first_autotune_s": first_tuned,
        "autotune": autotune,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 30)
