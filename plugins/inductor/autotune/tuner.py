"""Measured choice: build each candidate of a kernel, time it on the real inputs, keep the
fastest, and store the winner so that the next process only builds that one.

A :class:`Choice` is one way to compute a kernel's outputs: a name (stable across processes:
the store keys on it) and ``build(args)``, which compiles for ``args`` and returns the
launcher ``launch(*args)``. Block-size configs of a generated Triton kernel are choices
(``triton_kernels.py``), and so are matmul and convolution templates (``templates.py``) and the variants of a
generated C++ kernel (``cpp_kernels.py``).

Builds run on a pool of threads, each with a deadline (:data:`BUILD_TIMEOUT_S`): a config
that raises (an unsupported tile, out of shared memory when the binary loads) or does not
finish costs that config only. Threads, not processes: Triton's compiler passes release the
GIL and ``ptxas`` is a process of its own (its crash is an exception here), while a process
per worker would pay a CUDA context and a torch import each and still have to load the
winner here. What threads don't contain: a crash inside Triton's in-process compiler kills
the process, and a hung build keeps its thread until it ends.

Benchmarks run one candidate at a time, on copies of the arguments the kernel writes in
place (so repeated runs don't compound into the real values): on CUDA ``do_bench``'s median
(caches flushed between runs), elsewhere the median wall time of a few runs; light tuning
(:data:`LIGHT_TUNING`) passes the quicker :func:`quick_gpu_median_ms`, C++ kernels the batched
:func:`batched_min_ms`. Counters:
``torchkiln.counters["autotune"]``: ``benchmarked`` (candidates timed), ``tuned`` (kernels
measured), ``reused`` (stored winners taken), ``failed`` (candidates skipped), and where the
time goes: ``build_ms`` (waiting for builds) and ``measure_ms`` (benchmarking).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import torch

from torchkiln import counters, logs
from torchkiln.exc import KilnError

from .progress import progress
from .store import load_winner, store_winner, tuning_key

#: seconds a candidate's build may take before it is given up
BUILD_TIMEOUT_S = 120.0
#: most builds at the same time
BUILD_THREADS = 16
#: ``do_bench`` warm-up and measurement, in milliseconds of running the kernel
GPU_WARMUP_MS, GPU_REP_MS = 3, 15
#: timed runs of a candidate off the GPU (after one untimed)
CPU_RUNS = 3
#: C++ kernels: rounds of timing (each candidate timed once a round, in turn) and
#: :func:`batched_min_ms`'s least milliseconds of runs a batch
CPU_ROUNDS, CPU_BATCH_MS = 5, 0.5
#: light tuning: most timed launches of a candidate, and most milliseconds of them
LIGHT_RUNS, LIGHT_RUN_MS = 5, 10.0
#: GPU clock cycles a second of ``torch.cuda._sleep`` (an H100/H200 runs at up to 1.98 GHz;
#: a slower clock only sleeps longer)
SLEEP_CYCLES_PER_S = 2e9

Launch = Callable[..., None]
Benchmark = Callable[[Callable[[], None]], float]


@dataclass(frozen=True)
class TuningSettings:
    """What tuning may spend per kernel: ``max_autotune``'s (``autotune.*`` options), or
    :data:`LIGHT_TUNING`'s (``light``: a few configs of the kernels with a reduction, each
    timed by :func:`quick_gpu_median_ms`, ``triton_kernels.py``). ``rounds``: how many times
    each candidate is timed, the candidates in turn (C++ kernels: :data:`CPU_ROUNDS`).
    ``min_elements``: light tuning leaves kernels of fewer loop iterations (outer times
    inner elements) to the heuristic."""

    max_trials: int
    time_budget_s: float
    light: bool = False
    rounds: int = 1
    min_elements: int = 0


#: the default mode's tuning (option ``autotune.light``): the heuristic and one to three
#: neighbours (``configs.light_candidates``), measured in 50 ms at most (one candidate at
#: least), for kernels of 2**23 elements or more. In a log of five training and two inference
#: models on the H200 (bf16, 306 reduction kernels, each candidate timed) those were 49 kernels
#: and 69% of what tuning saved (12% of the reductions' time in all); the other 257 kernels'
#: candidates were most of a cold compile's Triton compiles, for 0.17 ms a step over the seven
#: models
LIGHT_TUNING = TuningSettings(max_trials=4, time_budget_s=0.05, light=True, min_elements=2**23)


@dataclass(frozen=True)
class Choice:
    """One candidate: ``build(args)`` compiles it for ``args`` (raising if it can't) and
    returns its launcher."""

    name: str
    build: Callable[[tuple[torch.Tensor, ...]], Launch]


def tune(
    kernel: str,
    problem: tuple,
    choices: Sequence[Choice],
    args: tuple[torch.Tensor, ...],
    in_place: Sequence[bool],
    settings: TuningSettings,
    benchmark: Benchmark | None = None,
    warm: Callable[[list[Choice]], None] | None = None,
) -> Launch:
    """The launcher of the fastest of ``choices`` (the first ``settings.max_trials``) on
    ``args``, or of the one an earlier run stored for the same ``problem`` (what names it
    besides the candidates: the kernel's source, the device, the argument sizes) and the same
    candidates. ``in_place[i]``: the kernel writes ``args[i]`` over values it must not lose,
    so benchmarks run on a copy. ``warm(choices)``, where given, prepares the builds of the
    choices about to be built (compiles them in worker processes)."""
    choices = list(choices[: settings.max_trials])
    by_name = {c.name: c for c in choices}
    key = tuning_key(*problem, list(by_name))
    stored = load_winner(key)
    if stored in by_name:
        launch = _build_all([by_name[stored]], args).get(stored)
        if launch is not None:
            counters["autotune"]["reused"] += 1
            logs.artifact("autotune", "%s: stored winner %s", kernel, stored)
            return launch
    if warm is not None:
        start = time.monotonic()
        warm(choices)
        counters["autotune"]["build_ms"] += round((time.monotonic() - start) * 1e3)
    built = _build_all(choices, args)
    copies = tuple(_copy(a) if copy else a for a, copy in zip(args, in_place, strict=True))
    timings = _measure(kernel, built, copies, settings, benchmark or _benchmark(args))
    if not timings:
        raise KilnError(
            f"autotuning {kernel}: no candidate built and ran ({', '.join(by_name)}); "
            "TORCHKILN_LOGS=autotune shows why each failed"
        )
    winner = min(timings, key=timings.__getitem__)
    counters["autotune"]["tuned"] += 1
    logs.artifact("autotune", "%s: winner %s (%.4f ms)", kernel, winner, timings[winner])
    store_winner(key, winner, timings)
    return built[winner]


def _copy(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a tensor of the same strides: kernels index by them."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _build_all(choices: list[Choice], args: tuple[torch.Tensor, ...]) -> dict[str, Launch]:
    """Build every choice on a pool of threads; those that raise or time out are skipped."""
    start = time.monotonic()
    pool = ThreadPoolExecutor(min(len(choices), BUILD_THREADS), thread_name_prefix="autotune")
    futures = {c.name: pool.submit(c.build, args) for c in choices}
    wait(futures.values(), timeout=BUILD_TIMEOUT_S)
    pool.shutdown(wait=False, cancel_futures=True)  # a hung build keeps only its own thread
    built = {}
    for name, future in futures.items():
        if not future.done():
            _skip(name, f"build did not finish in {BUILD_TIMEOUT_S:.0f} s")
        elif future.exception() is not None:
            _skip(name, f"build failed: {future.exception()!r}")
        else:
            built[name] = future.result()
    counters["autotune"]["build_ms"] += round((time.monotonic() - start) * 1e3)
    return built


def _measure(
    kernel: str,
    built: dict[str, Launch],
    args: tuple[torch.Tensor, ...],
    settings: TuningSettings,
    benchmark: Benchmark,
) -> dict[str, float]:
    """Each candidate's time (ms) in order, until the time budget runs out (one at least).
    With ``settings.rounds`` > 1 the candidates timed in the first round are timed again in
    turn, the order reversed every other round, and each keeps its fastest time: a shared
    host's speed drifts, and drift then slows every candidate alike."""
    timings: dict[str, float] = {}
    start = time.monotonic()

    def spent() -> bool:
        return time.monotonic() - start > settings.time_budget_s

    def timed(name: str, bar) -> float | None:
        try:
            return benchmark(functools.partial(built[name], *args))
        except Exception as e:  # a launch that fails costs this candidate only
            _skip(name, f"launch failed: {e!r}")
            return None
        finally:
            bar.update()

    with progress(kernel, len(built) * settings.rounds) as bar:
        for tried, name in enumerate(built):
            if timings and spent():
                left = len(built) - tried
                logs.artifact("autotune", "%s: time budget spent, %d left unmeasured", kernel, left)
                break
            if (ms := timed(name, bar)) is not None:
                timings[name] = ms
        for again in range(1, settings.rounds):
            names = list(timings)
            for name in reversed(names) if again % 2 else names:
                if spent():
                    break
                ms = timed(name, bar)
                if ms is None:
                    del timings[name]
                else:
                    timings[name] = min(timings[name], ms)
    for name, ms in timings.items():
        counters["autotune"]["benchmarked"] += 1
        logs.artifact("autotune", "%s %s: %.4f ms", kernel, name, ms)
    counters["autotune"]["measure_ms"] += round((time.monotonic() - start) * 1e3)
    return timings


def _skip(name: str, why: str) -> None:
    counters["autotune"]["failed"] += 1
    logs.artifact("autotune", "skipped %s: %s", name, why)


def _benchmark(args: tuple[torch.Tensor, ...]) -> Benchmark:
    if args and args[0].is_cuda:
        return functools.partial(gpu_median_ms, device=args[0].device)
    return wall_median_ms


def gpu_median_ms(fn: Callable[[], None], device: torch.device) -> float:
    """``fn``'s median time on ``device``, by CUDA events (Triton's ``do_bench``, which
    times the current GPU's stream)."""
    from triton.testing import do_bench

    with torch.cuda.device(device):
        return do_bench(fn, warmup=GPU_WARMUP_MS, rep=GPU_REP_MS, return_mode="median")


def quick_gpu_median_ms(fn: Callable[[], None], device: torch.device) -> float:
    """``fn``'s median time over at most :data:`LIGHT_RUNS` launches back to back, timed by
    CUDA events, and no more launches than fit in :data:`LIGHT_RUN_MS` by the first, untimed
    one: a light tuning can't spend ``do_bench``'s 18 ms per candidate on each of a graph's
    kernels. No L2 flush between launches (every candidate of a kernel meets the same warm
    cache): a flush buffer of twice the L2, allocated at the first call, raised the model's
    peak memory (an MLP's inference on an H200: 226 MiB, against 138 without light tuning).

    The timed launches queue up behind a GPU sleep as long as the host takes to issue
    them: else a kernel shorter than its launch's host time (tens of microseconds in
    Python, more on a loaded host) is timed at the host's pace, and the winner is noise."""
    with torch.cuda.device(device):
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(LIGHT_RUNS + 1)
        ]

        def timed(start: torch.cuda.Event, end: torch.cuda.Event) -> None:
            start.record()
            fn()
            end.record()

        host_start = time.perf_counter()
        timed(*events[0])
        host_s = time.perf_counter() - host_start
        events[0][1].synchronize()
        first_ms = events[0][0].elapsed_time(events[0][1])
        runs = events[1 : 1 + max(1, min(LIGHT_RUNS, int(LIGHT_RUN_MS / max(first_ms, 1e-3))))]
        torch.cuda._sleep(int((2 * host_s * len(runs) + 50e-6) * SLEEP_CYCLES_PER_S))
        for start, end in runs:
            timed(start, end)
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) for start, end in runs)


def wall_median_ms(fn: Callable[[], None]) -> float:
    """``fn``'s median wall time over :data:`CPU_RUNS` runs, after one untimed."""
    fn()
    times = []
    for _ in range(CPU_RUNS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def batched_min_ms(fn: Callable[[], None]) -> float:
    """``fn``'s time per run, for C++ kernels of microseconds: one run timed alone, then, if
    it took less than :data:`CPU_BATCH_MS`, a batch of as many runs as fill it; the faster
    per run. The C++ tuner times each candidate this way in each of :data:`CPU_ROUNDS`
    rounds and keeps the fastest (a cold first run, page faults on fresh copies, is
    dropped), not the median: on a shared host another process only ever adds time."""
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    runs = int(CPU_BATCH_MS * 1e-3 / max(once, 1e-7))
    if runs < 2:
        return once * 1e3
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return min(once, (time.perf_counter() - start) / runs) * 1e3


@functools.cache
def cpp_gemm_not_templated() -> None:
    """Said once per process: the matmul and convolution templates are Triton kernels."""
    logs.log.warning(
        "max_autotune_gemm: matmuls and convolutions of CPU graphs keep their oneDNN/BLAS "
        "calls (the templates are Triton kernels, for CUDA tensors)"
    )
