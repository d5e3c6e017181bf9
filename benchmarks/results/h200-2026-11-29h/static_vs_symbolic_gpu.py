"""In-process A/B on the GPU: HF GPT-2 inference (bf16) under torchkiln's inductor with
static kernels (``dynamic=False``) and symbolic ones (``dynamic=True``), torch.compile both
ways, and eager; per sequence length, the median over 7 rounds of each one's median of 10
calls, the variants alternating within a round.

    PYTHONPATH=. python benchmarks/results/h200-2026-11-29h/static_vs_symbolic_gpu.py small 64 256 500
"""

import statistics
import sys

import torch

import torchkiln
from benchmarks.dynamic import build_model


def call_time_us(fn, x, calls: int = 10) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(calls):
        start.record()
        fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main() -> None:
    size, lengths = sys.argv[1], [int(a) for a in sys.argv[2:]]
    model = build_model(size, 512).eval().to("cuda", torch.bfloat16)
    vocab = model.model.config.vocab_size
    variants = {
        "eager": model,
        "kiln static": torchkiln.compile(model, dynamic=False),
        "kiln symbolic": torchkiln.compile(model, dynamic=True),
        "torch.compile static": torch.compile(model, dynamic=False),
        "torch.compile symbolic": torch.compile(model, dynamic=True),
    }
    with torch.no_grad():
        for length in lengths:
            x = torch.randint(0, vocab, (2 if size == "small" else 16, length), device="cuda")
            for fn in variants.values():  # compile, and warm up
                for _ in range(3):
                    fn(x)
            rounds = {name: [] for name in variants}
            for _ in range(7):
                for name, fn in variants.items():
                    rounds[name].append(call_time_us(fn, x))
            eager = statistics.median(rounds["eager"])
            cells = [
                f"{name} {statistics.median(t):.0f} us ({eager / statistics.median(t):.2f}x)"
                for name, t in rounds.items()
            ]
            print(f"T={length}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
