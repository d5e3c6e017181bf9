"""Cold first step of one model with a timeline: when the compile workers connected, when
each compile job finished (worker or here), the precompile batches, the pipeline's phases.

    python .device_scripts/timeline.py MODEL CASE   (run with fresh cache env vars)
"""

import functools
import sys
import threading
import time

import torch

T0 = None
events = []
lock = threading.Lock()


def now():
    return time.perf_counter() - T0 if T0 is not None else -1.0


def mark(what):
    with lock:
        events.append((now(), threading.current_thread().name, what))


def wrap(module, qualname, label):
    owner = module
    parts = qualname.split(".")
    for p in parts[:-1]:
        owner = getattr(owner, p)
    fn = getattr(owner, parts[-1])

    @functools.wraps(fn)
    def timed(*a, **k):
        mark(f"begin {label}")
        try:
            return fn(*a, **k)
        finally:
            mark(f"end {label}")

    setattr(owner, parts[-1], timed)


def main():
    global T0
    model, case = sys.argv[1], sys.argv[2]
    T0 = time.perf_counter()
    import torchkiln
    from benchmarks.cases import loss_of
    from benchmarks.models import MODELS
    from benchmarks.rows import on_device

    mark("imported torchkiln")
    import torchkiln.aot.trace as trace
    import torchkiln.capture.frame_capture as fc
    import torchkiln_inductor.autotune.tuner as tuner
    import torchkiln_inductor.codegen.triton_binaries as tb
    import torchkiln_inductor.codegen.triton_launch as tl
    import torchkiln_inductor.codegen.triton_workers as tw
    import torchkiln_inductor.compile_fx as cf

    mark("imported inductor")
    wrap(tw, "warm_pool", "warm_pool")
    wrap(tw, "precompile", "precompile")
    wrap(tl, "compile_at_once", "compile_at_once")
    wrap(cf, "generate", "generate")
    wrap(cf, "StartedGraph.finish", "finish")
    wrap(tuner, "tune", "tune")
    wrap(trace, "trace_joint", "trace_joint")
    wrap(trace, "trace_inference", "trace_inference")
    wrap(fc, "translate", "translate")
    orig_connected = tw._Worker._connected

    def connected(self, todo):
        was = self._stream is not None
        ok = orig_connected(self, todo)
        if ok and not was:
            mark(f"worker connected pid={self._pid}")
        return ok

    tw._Worker._connected = connected
    orig_remember = tb.remember

    def remember(key, record):
        mark(f"job done {key.name if key else None} w={key.num_warps if key else ''}")
        return orig_remember(key, record)

    tb.remember = remember
    orig_cao = tl.compile_at_once

    def cao(kernels, in_workers=False, jobs=None):
        mark(f"compile_at_once kernels={len(kernels)} jobs={len(jobs or ())} workers={in_workers}")
        return orig_cao(kernels, in_workers, jobs)

    tl.compile_at_once = cao
    # the module imported the name: rebind there too
    import torchkiln_inductor.codegen.triton_module as tm

    tm.compile_at_once = cao

    built = MODELS[model].build("large")
    built = on_device(built, torch.device("cuda"), torch.bfloat16)
    built.module.train(case == "training")
    compiled = torchkiln.compile(built.module)
    torch.cuda.synchronize()
    mark("model built")
    start = now()
    if case == "training":
        loss_of(compiled(*built.inputs)).backward()
    else:
        with torch.no_grad():
            compiled(*built.inputs)
    torch.cuda.synchronize()
    mark("first step done")
    first = now() - start
    times = []
    for _ in range(3):
        s = time.perf_counter()
        if case == "training":
            loss_of(compiled(*built.inputs)).backward()
        else:
            with torch.no_grad():
                compiled(*built.inputs)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - s)
    mark("steady done")
    print(
        f"== {model} {case}: first step {first:.2f} s (from model built at {start:.2f}), steady {sorted(times)[1] * 1e3:.1f} ms"
    )
    print(dict(torchkiln.counters))
    jobs = [e for e in events if e[2].startswith("job done")]
    print(
        f"jobs done: {len(jobs)}; by thread: ",
        {t: sum(1 for e in jobs if e[1] == t) for t in sorted({e[1] for e in jobs})},
    )
    for t, th, what in events:
        if what.startswith("job done"):
            continue
        print(f"{t:8.3f} {th[:22]:22s} {what}")
    # job completion histogram per 0.25 s
    import collections

    hist = collections.Counter(int(e[0] * 4) / 4 for e in jobs)
    print("jobs finished per 0.25 s:", " ".join(f"{k:.2f}:{v}" for k, v in sorted(hist.items())))


if __name__ == "__main__":
    main()
