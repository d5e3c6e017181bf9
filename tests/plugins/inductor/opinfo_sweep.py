"""Compare compiled ops with eager on PyTorch's OpInfo sample inputs.

Every (op, dtype, sample) becomes one aten graph; all graphs of a sweep are
generated first and their kernels compiled in a single C++ translation unit
(one compiler run), then each is run and compared with eager.
Run as a script for a report: ``python tests/plugins/inductor/opinfo_sweep.py [--full]
[--triton] [--cuda] [--backward] [--progress]`` (``--triton``: CPU tensors through the Triton
generator, run by its interpreter; ``--cuda``: CUDA tensors, so Triton on the GPU, in float32,
bfloat16, float16 and int64; ``--backward``: forward and gradients of each op compiled as for
training, in float32, and bfloat16 and float16 with ``--cuda`` (``opinfo_sweep_backward.py``);
``--progress`` names each case on stderr before it runs).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field

import torch
from inductor_testing import aten_graph

from torchkiln.testing.opinfo import SWEEP_OPS, OpSample, assert_op_matches, opinfos, samples
from torchkiln_inductor.compile_fx import compile_many, generate
from torchkiln_inductor.options import InductorOptions

_DATA_DEPENDENT = {torch.ops.prims.item.default, torch.ops.aten._local_scalar_dense.default}


@dataclass
class SweepResult:
    passed: dict[str, set] = field(default_factory=dict)  # op -> dtypes
    failed: dict[tuple[str, torch.dtype], str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    fallback_only: set[str] = field(default_factory=set)
    fallbacks: dict[str, set[str]] = field(default_factory=dict)  # op -> its backward's aten calls


def sweep(
    names: list[str] | None,
    dtypes=(torch.float32, torch.bfloat16, torch.int64),
    max_samples: int = 2,
    opt_level: str = "O1",
    cpu_backend: str = "cpp",
    device: str = "cpu",
    progress: bool = False,
) -> SweepResult:
    result = SweepResult()
    cases: list[OpSample] = []
    for full_name, op in opinfos(names):
        for dtype in dtypes:
            if dtype in op.supported_dtypes(device):
                count = max_samples if dtype == torch.float32 else 1
                cases += samples(op, full_name, dtype, count, device)
    options = InductorOptions(opt_level=opt_level, cpu_backend=cpu_backend)
    ready = []
    for case in cases:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gm = aten_graph(case.fn, *case.inputs)
        except Exception as e:
            result.skipped.setdefault(case.op, f"cannot trace: {type(e).__name__}")
            continue
        if any(n.target in _DATA_DEPENDENT for n in gm.graph.nodes):
            result.skipped.setdefault(case.op, "data-dependent decomposition (.item())")
            continue
        try:
            ready.append((case, generate(gm, case.inputs, options)))
        except Exception as e:
            result.failed[(case.op, case.dtype)] = f"compile: {type(e).__name__}: {e}"[:300]
    compiled = compile_many([generated for _, generated in ready], opt_level)
    lowered: dict[str, bool] = {}
    for (case, _), fn in zip(ready, compiled):
        key = (case.op, case.dtype)
        if progress:  # a crash (not an exception) names the case it happened in
            print(f"running {case.op} {case.dtype}", file=sys.stderr, flush=True)
        try:
            assert_op_matches(case.op, fn(*case.inputs), case.expected)
        except Exception as e:
            result.failed.setdefault(key, f"run: {type(e).__name__}: {e}"[:300])
            continue
        if key not in result.failed:
            result.passed.setdefault(case.op, set()).add(case.dtype)
        lowered[case.op] = lowered.get(case.op, True) and not fn.fallbacks
    for op, _ in result.failed:
        result.passed.pop(op, None)
    result.fallback_only = {op for op in result.passed if not lowered.get(op)}
    return result


def main() -> None:
    full = "--full" in sys.argv
    backend = "triton" if "--triton" in sys.argv else "cpp"  # Triton's interpreter on CPU
    names = None if full else SWEEP_OPS
    cuda, progress = "--cuda" in sys.argv, "--progress" in sys.argv
    if backend == "triton" and not cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # triton reads it when first imported
    if "--backward" in sys.argv:
        from opinfo_sweep_backward import sweep_backward

        dtypes = (torch.float32, torch.bfloat16, torch.float16) if cuda else (torch.float32,)
        device = "cuda" if cuda else "cpu"
        res = sweep_backward(names, dtypes, cpu_backend=backend, device=device, progress=progress)
    elif cuda:
        dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.int64)
        res = sweep(names, dtypes=dtypes, device="cuda", progress=progress)
    else:
        res = sweep(names, cpu_backend=backend, progress=progress)
    report(res)


def report(res: SweepResult) -> None:
    """FAIL lines, SKIP lines for the ops no case of which ran, the counts, the covered ops."""
    for (op, dtype), why in sorted(res.failed.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print(f"FAIL {op} {dtype}: {why}")
    failed = {op for op, _ in res.failed}
    untested = {op: why for op, why in res.skipped.items() if op not in {*res.passed, *failed}}
    for op, why in sorted(untested.items()):
        print(f"SKIP {op}: {why}")
    covered = sorted(set(res.passed) - res.fallback_only)
    print(
        f"\npassed {len(res.passed)} ops ({len(covered)} lowered, no aten fallback); "
        f"failed {len(failed)}; skipped {len(res.skipped)} ({len(untested)} entirely)"
    )
    print("covered:", " ".join(covered))
    print("fallback only:", " ".join(sorted(res.fallback_only)))
    for op, calls in sorted(res.fallbacks.items()):
        if calls:
            print(f"backward fallbacks of {op}: {' '.join(sorted(calls))}")


if __name__ == "__main__":
    main()
