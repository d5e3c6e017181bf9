"""Timing and memory: medians after warm-up, CUDA-synchronized, with a hang guard."""

from __future__ import annotations

import contextlib
import re
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch


class RowTimeout(Exception):
    """A row ran past its time budget (the hang guard)."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ``RowTimeout`` in the main thread once ``seconds`` have passed.

    The alarm interrupts Python code only: a call stuck inside one C
    function is interrupted when it returns.
    """
    usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not seconds or not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise RowTimeout(f"ran past its time budget of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_call(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    """``fn()`` and its wall time in seconds, the device drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - start


def step_times_ms(
    step: Callable[[], Any], device: torch.device, warmup: int, reps: int, budget_s: float
) -> list[float]:
    """Per-step times in ms: ``warmup`` untimed steps, then up to ``reps`` timed ones.

    Stops early (after at least 3 timed steps) once ``budget_s`` is spent. On
    CUDA each step is bracketed by events and the device synchronized after
    it, so launch overhead that leaves the GPU idle counts.
    """
    for _ in range(warmup):
        step()
    synchronize(device)
    deadline = time.perf_counter() + budget_s
    times: list[float] = []
    while len(times) < reps and (len(times) < 3 or time.perf_counter() < deadline):
        times.append(one_step_ms(step, device))
    return times


def paired_step_times_ms(
    step: Callable[[], Any],
    baseline: Callable[[], Any],
    device: torch.device,
    reps: int,
    budget_s: float,
) -> tuple[list[float], list[float]]:
    """Per-step times in ms of ``step`` and ``baseline``, taken alternately: (step's, baseline's).

    Each round times one step of each, the order flipping every round, so that
    the host's load drifting over the rounds slows both alike and neither
    always runs right after the other. Up to ``reps`` rounds, stopping early
    (after at least 3) once ``budget_s`` is spent; both must be warm already.
    """
    deadline = time.perf_counter() + budget_s
    times: list[float] = []
    baseline_times: list[float] = []
    while len(times) < reps and (len(times) < 3 or time.perf_counter() < deadline):
        both = [(step, times), (baseline, baseline_times)]
        for fn, into in both if len(times) % 2 == 0 else both[::-1]:
            into.append(one_step_ms(fn, device))
    return times, baseline_times


def one_step_ms(step: Callable[[], Any], device: torch.device) -> float:
    """One step's time in ms: CUDA events around it, then synchronized; wall time on CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    step()
    return (time.perf_counter() - t0) * 1e3


def median(values: list[float]) -> float:
    return statistics.median(values)


class PeakMemory:
    """Peak memory of a stretch of work, above what was in use when it started.

    CUDA: the caching allocator's peak. CPU: the process's peak resident set
    (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``); None where
    that is not available.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.base_mb: float | None = None

    def start(self) -> None:
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base_mb = torch.cuda.memory_allocated(self.device) / 2**20
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.base_mb = _proc_status_mb("VmRSS")
        except OSError:
            self.base_mb = None

    def peak_mb(self) -> float | None:
        if self.base_mb is None:
            return None
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20 - self.base_mb
        peak = _proc_status_mb("VmHWM")
        return None if peak is None else max(0.0, peak - self.base_mb)


def _proc_status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) / 1024 if match else None
