"""Where torchkiln's steady-state call of GPT-2 small (T=500, bf16, inference) spends host
time: 200 unsynchronized calls timed for kiln, torch.compile and eager, then cProfile over
kiln's.

    PYTHONPATH=. python benchmarks/results/h200-2026-11-29h/cprof_gpt2.py
"""

import cProfile
import io
import pstats
import time

import torch

import torchkiln
from benchmarks.dynamic import build_model


def main() -> None:
    model = build_model("small", 512).eval().to("cuda", torch.bfloat16)
    x = torch.randint(0, model.model.config.vocab_size, (2, 500), device="cuda")
    fns = {
        "kiln": torchkiln.compile(model, dynamic=False),
        "torch": torch.compile(model, dynamic=False),
        "eager": model,
    }
    with torch.no_grad():
        for name, fn in fns.items():
            for _ in range(5):
                fn(x)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(200):
                fn(x)
            torch.cuda.synchronize()
            print(f"{name}: {(time.perf_counter() - start) / 200 * 1e6:.0f} us per call")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(200):
            fns["kiln"](x)
        torch.cuda.synchronize()
        profile.disable()
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(30)
        print(text.getvalue())


if __name__ == "__main__":
    main()
