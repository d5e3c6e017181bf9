"""Where a cold compile's time goes: cProfile over a row's first step, caches empty.

    python -m benchmarks.compile_profile --model nanogpt --case training \\
        --backend kiln:inductor [--device cuda --size large --dtype bfloat16 --top 40]

The benchmark tables say how long a row's first call takes (cold) against torch.compile's;
this says which of capture, the AOT layer, lowering, scheduling, code generation and the
kernel compiler it went to: the functions with the most cumulative and own time. The cache
root is a fresh temporary folder, so nothing compiled before is reused.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time

import torch

from benchmarks.cases import make_workload
from benchmarks.models import MODELS
from benchmarks.rows import on_device
from benchmarks.variants import parse_variant


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="nanogpt")
    parser.add_argument("--case", default="training")
    parser.add_argument("--backend", default="kiln:inductor")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default=None, help="default: large on cuda, small on cpu")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument(
        "--callers", metavar="REGEX", help="also who called the functions whose names match"
    )
    args = parser.parse_args()
    cuda = args.device == "cuda"
    size = args.size or ("large" if cuda else "small")
    dtype = getattr(torch, args.dtype or ("bfloat16" if cuda else "float32"))

    with tempfile.TemporaryDirectory() as root:
        for var in ("TORCHKILN_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
            os.environ[var] = os.path.join(root, var.lower())
        built = on_device(MODELS[args.model].build(size), torch.device(args.device), dtype)
        variant = parse_variant(args.backend)
        forward = variant.compile(built.module)
        work = make_workload(built.module, forward, built.inputs, args.case)
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        work.step()
        if cuda:
            torch.cuda.synchronize()
        profiler.disable()
        total = time.perf_counter() - start

    print(f"== {args.model} {args.case} {args.backend} ({size}, {dtype}): first step {total:.2f} s")
    for order in ("cumulative", "tottime"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(args.top)
        print(f"\n-- by {order} time --")
        print(text.getvalue().split("\n\n", 1)[-1])
    if args.callers:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text).sort_stats("tottime")
        stats.print_callers(args.callers)
        print(f"\n-- callers of {args.callers} --")
        print(text.getvalue().split("\n\n", 1)[-1])
    if args.backend.startswith("kiln"):
        from torchkiln import counters

        print("\n-- torchkiln counters --")
        for group, values in sorted(counters.items()):
            print(f"{group}: {dict(values)}")


if __name__ == "__main__":
    main()
