"""One row: a model x case x variant, measured from a fresh copy of the model.

Phases, each named in the error when it fails: ``setup`` (eager's reference
results when this worker has none yet, the model copied to the device),
``first step`` (wrap the model and run one step: lazy compilers compile
here, and its wall time is the cold compile time), ``check`` (compare the
first step's results with eager's), ``steady state`` (the timed steps, then
the peak memory), and for a non-eager row ``paired``: a fresh eager copy of
the model is built and warmed, and the row and that copy are timed
alternately (``measure.paired_step_times_ms``), so that the host's load
drifting hits both alike. A row that fails in ``paired`` (its budget ran
out) keeps its own numbers, with ``paired_error`` saying why it has no
paired ones.
"""

from __future__ import annotations

import copy
import gc
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.bandwidth import tensor_bytes
from benchmarks.caches import compiler_caches
from benchmarks.cases import LateForward, Workload, make_workload, max_abs_diff
from benchmarks.measure import (
    PeakMemory,
    median,
    paired_step_times_ms,
    step_times_ms,
    time_limit,
    timed_call,
)
from benchmarks.models import Built
from benchmarks.results import FAILED, OK, Row
from benchmarks.variants import EAGER, Variant

MEMORY_BOUND_MODEL = "chain"


@dataclass(frozen=True)
class Settings:
    device: torch.device
    dtype: torch.dtype
    warmup: int
    reps: int
    step_budget_s: float
    cache_root: Path
    #: Time each non-eager row in alternation with a fresh eager copy too.
    paired: bool = True


def on_device(built: Built, device: torch.device, dtype: torch.dtype) -> Built:
    """A copy of the model and inputs on ``device``; floating tensors cast to ``dtype``."""
    module = copy.deepcopy(built.module).to(device=device, dtype=dtype)
    inputs = tuple(
        t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
        for t in built.inputs
    )
    return Built(module, inputs)


def first_step(
    built: Built, case: str, variant: Variant, device: torch.device
) -> tuple[Workload, object, float]:
    """Compile and run one step: the workload, the step's output, and the seconds both took
    (the workload, its optimizer included, is made first: ``LateForward``)."""
    forward = LateForward()
    workload = make_workload(
        built.module,
        forward,
        built.inputs,
        case,
        mark_cuda_graph_steps=variant.replays_cuda_graphs,
    )
    forward.fn, wrap_s = timed_call(lambda: variant.compile(built.module), device)
    output, step_s = timed_call(workload.step, device)
    return workload, output, wrap_s + step_s


def cache_dir_for(root: Path, model: str, case: str, variant: Variant) -> Path:
    slug = "".join(c if c.isalnum() else "_" for c in variant.label)
    return root / f"{model}-{case}-{slug}"


def describe_error(phase: str, error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    message = f"{phase}: {type(error).__name__}: {first}"
    return message if len(message) <= 240 else message[:237] + "..."


class RowRunner:
    """Runs rows, keeping eager's first-step results as the reference for the others.

    A worker that starts after a crash lacks the references of the eager rows
    run before it: they are recomputed (one untimed eager step) when needed.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.references: dict[tuple[str, str], dict[str, torch.Tensor]] = {}

    def run(self, model: str, built: Built, case: str, variant: Variant, budget_s: float) -> Row:
        s = self.settings
        row = Row(model, case, variant.label)
        row.cache_dir = str(cache_dir_for(s.cache_root, model, case, variant))
        memory = PeakMemory(s.device)
        phase = "setup"
        try:
            with time_limit(budget_s):
                reference = self._reference(model, built, case, variant)
                memory.start()
                with compiler_caches(Path(row.cache_dir)):
                    local = on_device(built, s.device, s.dtype)
                    phase = "first step"
                    workload, output, first_s = first_step(local, case, variant, s.device)
                    phase = "check"
                    results = workload.results(output)
                    if variant.label == EAGER:
                        self.references[(model, case)] = results
                    else:
                        row.cold_compile_s = first_s
                        row.max_abs_diff = max_abs_diff(reference, results) if reference else None
                    phase = "steady state"
                    times = step_times_ms(
                        workload.step, s.device, s.warmup, s.reps, s.step_budget_s
                    )
                    row.median_ms, row.reps = median(times), len(times)
                    row.peak_mem_mb = memory.peak_mb()
                    row.achieved_gbps = _achieved_gbps(row, local)
                    row.status = OK
                    if s.paired and variant.label != EAGER:
                        phase = "paired"
                        self._time_paired(row, built, case, workload)
        except Exception as e:
            if phase == "paired":
                row.paired_error = describe_error(phase, e)
            else:
                row.status, row.error = FAILED, describe_error(phase, e)
                row.error_detail = traceback.format_exc()[-2000:]
        finally:
            local = workload = output = None
            gc.collect()
            if s.device.type == "cuda":
                torch.cuda.empty_cache()
        return row

    def _time_paired(self, row: Row, built: Built, case: str, workload: Workload) -> None:
        """Time the row's warm ``workload`` and a fresh, warmed eager copy alternately.

        The same reps and, for each of the two, the same step budget as the row's own
        steady state. The eager copy has its own parameters and optimizer; it is freed
        on return, and the row's ``finally`` collects it.
        """
        s = self.settings
        local = on_device(built, s.device, s.dtype)
        eager, _, _ = first_step(local, case, Variant(EAGER, EAGER), s.device)
        for _ in range(s.warmup):
            eager.step()
        times, eager_times = paired_step_times_ms(
            workload.step, eager.step, s.device, s.reps, 2 * s.step_budget_s
        )
        row.paired_ms, row.paired_eager_ms = median(times), median(eager_times)
        row.paired_speedup = median([e / t for t, e in zip(times, eager_times)])
        row.paired_reps = len(times)

    def _reference(
        self, model: str, built: Built, case: str, variant: Variant
    ) -> dict[str, torch.Tensor] | None:
        key = (model, case)
        if variant.label == EAGER or key in self.references:
            return self.references.get(key)
        s = self.settings
        try:
            local = on_device(built, s.device, s.dtype)
            workload, output, _ = first_step(local, case, Variant(EAGER, EAGER), s.device)
            self.references[key] = workload.results(output)
        except Exception:
            return None
        return self.references[key]


def _achieved_gbps(row: Row, built: Built) -> float | None:
    """GB/s of the memory-bound chain's inference: input and output bytes, plus its parameters."""
    if row.model != MEMORY_BOUND_MODEL or row.case != "inference" or not row.median_ms:
        return None
    moved = 2 * tensor_bytes(built.inputs) + tensor_bytes(tuple(built.module.parameters()))
    return moved / (row.median_ms / 1e3) / 1e9
