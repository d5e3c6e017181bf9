"""In-process A/B: HF GPT-2 tiny inference under the inductor with static kernels
(``dynamic=False``) and with symbolic ones (``dynamic=True``), and eager, alternating; per
sequence length, the median over 5 rounds of each one's median of 5 calls.

    PYTHONPATH=. python benchmarks/results/cpu-2026-11-29g-dynamic/static_vs_symbolic_ab.py 64 256 500
"""

import statistics
import sys
import time

import torch

import torchkiln
from benchmarks.dynamic import build_model


def call_time(fn, x, calls: int = 5) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    model = build_model("tiny", 512).eval()
    vocab = model.model.config.vocab_size
    variants = {
        "eager": model,
        "static": torchkiln.compile(model, dynamic=False),
        "symbolic": torchkiln.compile(model, dynamic=True),
    }
    with torch.no_grad():
        for length in [int(a) for a in sys.argv[1:]] or [64, 256, 500]:
            x = torch.randint(0, vocab, (2, length))
            for fn in variants.values():  # compile, and warm up
                fn(x)
                fn(x)
            rounds = {name: [] for name in variants}
            for _ in range(5):
                for name, fn in variants.items():
                    rounds[name].append(call_time(fn, x))
            medians = ", ".join(
                f"{name} {statistics.median(t) * 1e3:.2f} ms" for name, t in rounds.items()
            )
            print(f"T={length}: {medians}")


if __name__ == "__main__":
    main()
