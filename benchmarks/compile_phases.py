"""Where a cold compile's wall time goes, phase by phase, side by side with torch.compile's.

    python -m benchmarks.compile_phases --device cuda --models mlp,nanogpt --case training \\
        --backends kiln:inductor,torch.compile

Each (model, backend) runs in its own process on fresh, empty caches (``benchmarks.caches``):
the first step (imports done, model built; the compile call and the compile included) is
timed, then the median of ``STEADY_STEPS`` more, and compile time is their difference, as
``benchmarks.warm_start`` counts it. The ``compile(model)`` call is in the first step, as
in the harness (``rows.first_step``): ``torch.compile`` imports TorchDynamo there (4.5-5.9 s
in a process of the H200 machine, whose packages have no bytecode caches), where
torchkiln imports it at the first capture (torch's fake tensors need it). A training
workload's optimizer is made before the clock starts, as a training loop makes it before
its first step (``cases.LateForward``): it imports TorchDynamo for both.

For torchkiln backends the first step is split into phases by timing a few functions of
the pipeline (capture, the AOT layer's tracing and partitioning, the inductor's
generation, the wait for Triton's compiles, a training graph's forward and backward
compiled together (on a GPU), first-call tuning, the backward's lazy compile). A phase's
time is the union of its calls' wall intervals, so nested and concurrent calls count once;
phases nest in one another (``backward compile`` holds its own generation and kernel
compiles), so they do not add up to the total. Unlike
``benchmarks.compile_profile`` (cProfile), nothing slows the Python-heavy phases down.
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import importlib.abc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.caches import cache_env

STEADY_STEPS = 3

#: phase name -> the functions (``module:qualname``) whose calls make it up
PHASES = {
    "capture (bytecode to FX)": ["torchkiln.capture.frame_capture:translate"],
    "AOT trace": ["torchkiln.aot.trace:trace_joint", "torchkiln.aot.trace:trace_inference"],
    "AOT partition": ["torchkiln.aot.partition:min_cut_partition"],
    "inductor generate (lower, schedule, codegen)": ["torchkiln_inductor.compile_fx:generate"],
    "inductor load (kernel compiles, bind)": ["torchkiln_inductor.artifact:GraphArtifact.load"],
    "  of it: waiting for compile workers": [
        "torchkiln_inductor.codegen.triton_workers:precompile"
    ],
    "forward and backward compiled together": ["torchkiln.aot.api:_AOTCompiled._compile_both"],
    "  of it: waiting for their kernels": ["torchkiln_inductor.compile_fx:StartedGraph.finish"],
    "first-call tuning": ["torchkiln_inductor.autotune.tuner:tune"],
    "backward compile (at first backward)": [
        "torchkiln.aot.runtime:TrainingPlan._compile_backward"
    ],
}


class StackSampler(threading.Thread):
    """Samples a thread's Python stack every ``interval`` seconds: where its wall time goes,
    functions counted inclusively (once per sample however deep they recurse), without
    slowing each call as cProfile does."""

    def __init__(self, thread_id: int, interval: float = 0.005):
        super().__init__(daemon=True)
        self.thread_id, self.interval = thread_id, interval
        self.inclusive: collections.Counter = collections.Counter()
        self.own: collections.Counter = collections.Counter()
        self.samples = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            frame = sys._current_frames().get(self.thread_id)
            if frame is None:
                continue
            self.samples += 1
            self.own[_where(frame)] += 1
            seen = set()
            while frame is not None:
                seen.add(_where(frame))
                frame = frame.f_back
            self.inclusive.update(seen)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def top(self, n: int) -> list[tuple[str, float, float]]:
        """(function, inclusive share, own share) of the ``n`` functions with most samples and
        the ``n`` with most samples of their own (the ancestors of every call fill the first),
        most inclusive first."""
        total = max(self.samples, 1)
        picked = {where for where, _ in self.inclusive.most_common(n)}
        picked |= {where for where, _ in self.own.most_common(n)}
        return sorted(
            ((where, self.inclusive[where] / total, self.own[where] / total) for where in picked),
            key=lambda row: (-row[1], -row[2]),
        )


def _where(frame) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("site-packages/", "/work/main/", "python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{code.co_firstlineno}({code.co_name})"


def _own(holder: object, name: str) -> object:
    """``holder``'s own attribute ``name``, not ``getattr``'s: a lazy module (transformers')
    imports on a missing attribute."""
    return getattr(holder, "__dict__", {}).get(name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """An import hook: ``then(phase, module, qualname)`` for each ``(phase, qualname)`` of
    ``waiting[module]`` once that module has run."""

    def __init__(self, waiting: dict[str, list[tuple[str, str]]], then):
        self.waiting, self.then = waiting, then

    def find_spec(self, name, path, target=None):
        if name not in self.waiting:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module
        wrapped = self.waiting.pop(name)

        def exec_module(module) -> None:
            run(module)
            for phase, qualname in wrapped:
                self.then(phase, name, qualname)

        spec.loader.exec_module = exec_module
        return spec


class PhaseClock:
    """Wall intervals of the calls of each phase's functions."""

    def __init__(self) -> None:
        self.intervals: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
        #: (class, or None for a module-level function), name, timed copy, original
        self._replaced: list[tuple[object, str, object, object]] = []
        self._lock = threading.Lock()
        self._hook: _AfterImport | None = None

    def wrap(self, phase: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.intervals[phase].append((start, time.perf_counter()))

        return timed

    def install(self) -> None:
        """Time each phase function: now where its module is loaded, else as soon as it is
        (an import hook), so that the first step still pays for importing it, as torch.compile's
        pays for importing its compiler."""
        waiting = {}
        for phase, targets in PHASES.items():
            for target in targets:
                module_name, qualname = target.split(":")
                if module_name in sys.modules:
                    self._wrap(phase, module_name, qualname)
                else:
                    waiting.setdefault(module_name, []).append((phase, qualname))
        if waiting:
            self._hook = _AfterImport(waiting, self._wrap)
            sys.meta_path.insert(0, self._hook)

    def _wrap(self, phase: str, module_name: str, qualname: str) -> None:
        """Replace the function wherever a loaded module holds it (``from m import f`` copies
        included), and on its class for methods."""
        owner = sys.modules[module_name]
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        timed = self.wrap(phase, original)
        if path:
            setattr(owner, name, timed)
            self._replaced.append((owner, name, timed, original))
            return
        for holder in list(sys.modules.values()):
            if _own(holder, name) is original:
                setattr(holder, name, timed)
        self._replaced.append((None, name, timed, original))

    def uninstall(self) -> None:
        """Put every replaced function back: in its class, and in every loaded module that
        holds the timed copy (modules imported while the clock ran copied it too)."""
        if self._hook in sys.meta_path:
            sys.meta_path.remove(self._hook)
        for owner, name, timed, original in reversed(self._replaced):
            for holder in [owner] if owner is not None else list(sys.modules.values()):
                if _own(holder, name) is timed:
                    setattr(holder, name, original)
        self._replaced.clear()

    def seconds(self) -> dict[str, float]:
        out = {}
        for phase, spans in self.intervals.items():
            total, end = 0.0, float("-inf")
            for a, b in sorted(spans):
                if b > end:
                    total += b - max(a, end)
                    end = b
            out[phase] = total
        return out


def child(model: str, backend: str, case: str, device: str, size: str, sample: int) -> dict:
    """One row in this process: its first and steady steps, phases and counters (kiln), and
    the ``sample`` functions its first step's stack showed most."""
    import torchkiln  # noqa: F401  (imported before the clock, as a user's program would)

    clock = None
    if backend.startswith("kiln"):  # the backend's own modules are imported by the first step
        clock = PhaseClock()
        clock.install()
    try:
        result = _steps(model, backend, case, device, size, sample)
    finally:
        if clock is not None:
            clock.uninstall()
    if clock is not None:
        from torchkiln import counters

        result["phases"] = clock.seconds()
        result["counters"] = {group: dict(values) for group, values in counters.items()}
    return result


def _steps(model: str, backend: str, case: str, device: str, size: str, sample: int) -> dict:
    import torch

    from benchmarks.cases import LateForward, make_workload
    from benchmarks.models import MODELS
    from benchmarks.rows import on_device
    from benchmarks.variants import parse_variant

    cuda = device == "cuda"
    built = MODELS[model].build(size)
    built = on_device(built, torch.device(device), torch.bfloat16 if cuda else torch.float32)
    sampler = StackSampler(threading.get_ident()) if sample else None
    if sampler:
        sampler.start()
    forward = LateForward()  # the workload (its optimizer) first, as in the harness
    work = make_workload(built.module, forward, built.inputs, case)
    start = time.perf_counter()
    forward.fn = parse_variant(backend).compile(built.module)
    compile_call = time.perf_counter() - start

    def step() -> float:
        start = time.perf_counter()
        work.step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = compile_call + step()
    if sampler:
        sampler.stop()
    steady = statistics.median(step() for _ in range(STEADY_STEPS))
    samples = sampler.top(sample) if sampler else []
    return {"first": first, "steady": steady, "phases": {}, "counters": {}, "samples": samples}


def run_child(model: str, backend: str, case: str, device: str, size: str, sample: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="compile-phases-") as tmp:
        command = [sys.executable, "-m", "benchmarks.compile_phases", "--child"]
        command += ["--models", model, "--backends", backend, "--case", case]
        command += ["--device", device, "--size", size, "--sample", str(sample)]
        env = {**os.environ, **cache_env(Path(tmp))}
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(model: str, case: str, results: dict[str, dict]) -> None:
    print(f"\n== {model} {case}")
    for backend, r in results.items():
        compile_s = r["first"] - r["steady"]
        print(
            f"{backend:24s} first step {r['first']:7.2f} s  steady {r['steady'] * 1e3:7.1f} ms"
            f"  compile {compile_s:7.2f} s"
        )
        for phase, seconds in r["phases"].items():
            print(f"    {phase:46s} {seconds:7.2f} s")
        for group in ("triton_workers", "triton_launch", "autotune", "inductor", "aot"):
            if group in r["counters"]:
                print(f"    counters[{group!r}]: {r['counters'][group]}")
        if r["samples"]:
            print("    main thread's stack, sampled (share of the first step: inclusive, own):")
            for where, inclusive, own in r["samples"]:
                if where.startswith(("benchmarks/", "<frozen runpy>")):
                    continue  # this script's own frames, above the step
                print(f"      {inclusive:6.1%} {own:6.1%}  {where}")
    kiln = [b for b in results if b.startswith("kiln")]
    if "torch.compile" in results:
        torch_s = results["torch.compile"]["first"] - results["torch.compile"]["steady"]
        for b in kiln:
            ratio = (results[b]["first"] - results[b]["steady"]) / torch_s
            print(f"{b} compile / torch.compile's: {ratio:.2f}x")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="mlp,nanogpt")
    p.add_argument("--backends", default="kiln:inductor,torch.compile")
    p.add_argument("--case", default="training", choices=("inference", "training"))
    p.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("--size", default=None, help="default: large on cuda, small on cpu")
    p.add_argument(
        "--sample",
        type=int,
        default=0,
        metavar="N",
        help="also sample the first step's stack and print the N functions seen most",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    size = args.size or ("large" if args.device == "cuda" else "small")
    if args.child:
        result = child(args.models, args.backends, args.case, args.device, size, args.sample)
        print(json.dumps(result))
        return
    for model in args.models.split(","):
        results = {
            b: run_child(model, b, args.case, args.device, size, args.sample)
            for b in args.backends.split(",")
        }
        report(model, args.case, results)


if __name__ == "__main__":
    main()
