"""Cold vs warm compile: how long the first step takes in a first and a second process.

For each model, two child processes run one after the other against the same
fresh cache directory (``TORCHKILN_CACHE_DIR`` and friends, see
``benchmarks.caches``). Each child builds the model and its inputs, then times
the first step of ``torchkiln.compile(model, backend=...)`` in the ``--case``:
inference (eval mode, under ``torch.no_grad``) or training (train mode, forward,
``benchmarks.cases.loss_of``, backward; an optimizer made before the clock starts, as a
training loop makes it, but no optimizer step, which compiles nothing):
the first child compiles cold, the second finds the on-disk caches filled and
measures what is left (frame capture, guards, loading compiled artifacts).
Each child then runs ``STEADY_STEPS`` more steps: a step's own work (the model's
arithmetic, the same in both children) is their median, and the compile time is the
first step less that, so that a model whose step is long is not read as slow to load.
Both the first steps and the compile times are printed, each with warm/cold.

With ``--eager-first`` each child runs one eager step before the clock starts, as torch's
benchmark harness runs eager first (its accuracy check): the first uses of what every
program pays for once, compiled or not (cuBLAS's handles and workspaces, CUDA's lazily
loaded kernel modules, autograd's device threads: 0.19 s of a warm mlp training step on
the H200), are then not counted as compile time.

    .venv/bin/python -m benchmarks.warm_start --models hf_gpt2,hf_bert,hf_llama
    .venv/bin/python -m benchmarks.warm_start --backend onnxrt --case training
    .venv/bin/python -m benchmarks.warm_start --models hf_gpt2 --profile   # cProfile the warm child
    python -m benchmarks.warm_start --device cuda --size large --case training   # bf16 on a GPU
    python -m benchmarks.warm_start --device cuda --size large --eager-first
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.caches import cache_env
from benchmarks.cases import CASES, loss_of
from benchmarks.models import MODELS, SIZES

PROFILE_LINES = 30
STEADY_STEPS = 3


def first_step_seconds(
    model: str, size: str, backend: str, case: str, device: str, profile: bool, eager_first: bool
) -> tuple[float, float]:
    """Build ``model``, compile it, and time the first step of ``case`` and, after it, the
    median of ``STEADY_STEPS`` more (on CUDA in bfloat16, synchronized); with
    ``eager_first``, after one untimed eager step."""
    import torch

    import torchkiln
    from benchmarks.rows import on_device

    cuda = device == "cuda"
    built = MODELS[model].build(size)
    if cuda:
        built = on_device(built, torch.device(device), torch.bfloat16)
    built.module.train(case == "training")
    if case == "training":  # as a training loop does before its first step (``LateForward``)
        torch.optim.AdamW(built.module.parameters())

    def step(model: Callable) -> float:
        start = time.perf_counter()
        if case == "training":
            loss_of(model(*built.inputs)).backward()
        else:
            with torch.no_grad():
                model(*built.inputs)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    if eager_first:
        step(built.module)
    start = time.perf_counter()  # the compile call counts with the first step, as in the harness
    compiled = torchkiln.compile(built.module, backend=backend)
    compile_call = time.perf_counter() - start
    profiler = cProfile.Profile() if profile else None

    if profiler is not None:
        profiler.enable()
    seconds = compile_call + step(compiled)
    if profiler is not None:
        profiler.disable()
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(PROFILE_LINES)
        stats.sort_stats("tottime").print_stats(PROFILE_LINES)
    return seconds, statistics.median(step(compiled) for _ in range(STEADY_STEPS))


def run_child(
    args: argparse.Namespace, model: str, cache_dir: Path, profile: bool
) -> tuple[float, float]:
    """Run one child process on ``cache_dir``: its first step's and steady step's seconds."""
    command = [sys.executable, "-m", "benchmarks.warm_start", "--child", model, "--size", args.size]
    command += ["--backend", args.backend, "--case", args.case, "--device", args.device]
    command += ["--profile"] if profile else []
    command += ["--eager-first"] if args.eager_first else []
    env = {**os.environ, **cache_env(cache_dir)}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    first, steady = done.stdout.strip().splitlines()[-1].split()
    return float(first), float(steady)


def compare(args: argparse.Namespace, model: str) -> None:
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        cold, cold_step = run_child(args, model, Path(tmp), profile=False)
        warm, warm_step = run_child(args, model, Path(tmp), args.profile)
    cold_compile, warm_compile = cold - cold_step, warm - warm_step
    print(
        f"{model:12s} first step: cold {cold:6.2f} s  warm {warm:5.2f} s  ({warm / cold:6.1%})"
        f"   compile (first - steady step {cold_step * 1e3:.0f}/{warm_step * 1e3:.0f} ms):"
        f" cold {cold_compile:6.2f} s  warm {warm_compile:5.2f} s"
        f"  warm/cold {warm_compile / cold_compile:6.1%}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="hf_gpt2,hf_bert,hf_llama", help="comma-separated zoo names")
    p.add_argument("--size", choices=SIZES, default="small")
    p.add_argument("--backend", default="inductor")
    p.add_argument("--case", choices=CASES, default="inference")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--profile", action="store_true", help="print the warm child's cProfile top entries"
    )
    p.add_argument(
        "--eager-first", action="store_true", help="run one eager step before the clock starts"
    )
    p.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        seconds = first_step_seconds(
            args.child,
            args.size,
            args.backend,
            args.case,
            args.device,
            args.profile,
            args.eager_first,
        )
        print(*seconds)
        return
    for model in args.models.split(","):
        compare(args, model)


if __name__ == "__main__":
    main()
