"""MetaSchedule tuning of a graph's kernels, its records kept on disk for later processes.

With ``tuning_trials > 0`` (``mode="max-autotune"``) the Relax module's fused TIR
functions with a reduction are MetaSchedule's tasks (``extract_tasks``), on CPU and on
CUDA; tasks with no record in the database are tuned, for at most ``trials`` candidates
in all and ``time_budget_s`` seconds (:mod:`torchkiln_tvm.measure`, each candidate
built and timed on the target's device); the build then gives each kernel its best
schedule in the records, and the others the default one (:func:`default_schedule`). The records are a
``JSONDatabase`` in ``cache_dir`` (default: ``tvm-tuning`` under torchkiln's cache), so
a process that meets the same kernels again tunes nothing.

Needs apache-tvm-ffi 0.1.14.post0: apache-tvm 0.27.0.post1 asks for ``>=0.1.14.post0``,
but with 0.1.15 and later serializing any TIR node to JSON (which MetaSchedule does for
each task) segfaults in ``tvm::ffi::ToJSONGraph``.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import platform
import sys
import time
import types
from pathlib import Path

import torch
import tvm_ffi

import tvm
from torchkiln import counters
from torchkiln.exc import BackendUnavailable
from torchkiln.plugin import private_cache_dir, scratch_dir
from torchkiln_tvm import gpu_schedule
from torchkiln_tvm.measure import Deadline, SerializingBuilder, WorkerRunner
from torchkiln_tvm.schedule import LoopOrder, kernel_passes
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.analysis import estimate_tir_flops
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

log = logging.getLogger("torchkiln.tvm")

#: MetaSchedule's own log (a table of every task after each round): quiet unless asked.
search_log = logging.getLogger("torchkiln.tvm.meta_schedule")
search_log.setLevel(logging.WARNING)
#: Its task scheduler's logger prints a table of every task after each round: quiet unless
#: the user set its level.
if logging.getLogger("tvm.s_tir.meta_schedule").level == logging.NOTSET:
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)

#: The apache-tvm-ffi release apache-tvm 0.27.0.post1 was built against.
FFI_VERSION = "0.1.14.post0"

#: Candidates measured in a kernel's first round: few, so that every kernel gets some
#: before the budget runs out (MetaSchedule's random candidates are already tiled and
#: vectorized, many times faster than the plain loops); then in each later round.
FIRST_ROUND_TRIALS = 4
TRIALS_PER_ROUND = 16

#: Rounds a kernel may go without getting :data:`GAIN` faster before its tuning stops.
PATIENCE = 3
GAIN = 0.03

#: Seconds one candidate may take to build and run before it counts as failed.
CANDIDATE_TIMEOUT_S = 10.0

#: Seconds the worker may take to import TVM and open the device before the first candidate.
WARM_UP_TIMEOUT_S = 60.0

#: The evolutionary search of a round: MetaSchedule's default population (512, evolved 4
#: times) takes seconds a round to pick 16 candidates, and with a random cost model its
#: evolution only mixes what the records' best already do.
SEARCH = {"population_size": 64, "genetic_num_iters": 1, "init_min_unmeasured": 32}


def check_usable() -> None:
    """Tuning needs the tvm-ffi release whose JSON serialization works with this TVM."""
    if tvm_ffi.__version__ != FFI_VERSION:
        raise BackendUnavailable(
            f"the tvm backend's tuning needs apache-tvm-ffi=={FFI_VERSION} (this is "
            f"{tvm_ffi.__version__}, with which apache-tvm {tvm.__version__} segfaults "
            f"serializing its kernels): pip install 'apache-tvm-ffi=={FFI_VERSION}'"
        )


def records_dir(cache_dir: str | None) -> Path:
    """The database's folder: ``cache_dir``, else ``tvm-tuning`` in torchkiln's private
    cache; a scratch folder (records lost at exit) when that cache is shared."""
    if cache_dir is not None:
        folder = Path(cache_dir)
    else:
        root = private_cache_dir()
        folder = root / "tvm-tuning" if root is not None else scratch_dir() / "tvm-tuning"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


def tuning_target(target: tvm.target.Target) -> tvm.target.Target:
    """``target`` with the ``num-cores`` MetaSchedule asks of CPU targets: torch's threads."""
    if target.kind.name != "llvm" or "num-cores" in target.attrs:
        return target
    return tvm.target.Target({**target.export(), "num-cores": torch.get_num_threads()})


def tuned_records(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    *,
    trials: int,
    time_budget_s: float | None,
    cache_dir: str | None,
    fast_math: bool = True,
) -> tuple[ms.database.Database, tvm.target.Target]:
    """The records of ``mod``'s kernels after tuning those that have none, and the target
    they are for (``target`` with ``num-cores``): what the build looks its kernels up in."""
    check_usable()
    target = tuning_target(target)
    database = ms.database.JSONDatabase(work_dir=str(records_dir(cache_dir)))
    tasks = ms.relax_integration.extract_tasks(fused(mod, target, fast_math), target)
    tasks = [t for t in tasks if reduces(t.dispatched[0]["main"])]
    untuned = [t for t in tasks if not database.has_workload(t.dispatched[0])]
    counters["tvm"]["kernels_from_records"] += len(tasks) - len(untuned)
    log.info(
        "tvm: %d kernels with a reduction, %d of them in the records",
        len(tasks),
        len(tasks) - len(untuned),
    )
    if untuned:
        tune(untuned, database, trials, time_budget_s)
    return database, target


def reduces(func: tvm.tirx.PrimFunc) -> bool:
    """Whether a block of ``func`` reduces (matmuls, convolutions, norms): the kernels
    tuning is for. MetaSchedule's design space of an injective kernel (copies, slices,
    elementwise math) has one point: its search, looking for candidates it has not
    measured, spun 16-68 s a round on hf_llama's rotary-embedding kernels for one trial.
    Those keep the default schedule."""
    sch = s_tir.Schedule(func)
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    while blocks:
        block = blocks.pop()
        if any(v.iter_type == tvm.tirx.IterVar.CommReduce for v in sch.get(block).iter_vars):
            return True
        blocks += sch.get_child_blocks(block)
    return False


def fused(mod: tvm.IRModule, target: tvm.target.Target, fast_math: bool = True) -> tvm.IRModule:
    """``mod`` with its fused TIR kernels: the passes the build runs before it looks the
    kernels up in the database (:func:`torchkiln_tvm.schedule.kernel_passes` on CPU,
    :func:`torchkiln_tvm.gpu_schedule.kernel_passes` on CUDA), so that the tuned kernels
    are the ones it looks up."""
    if target.kind.name == "llvm":
        passes = kernel_passes(target, fast_math=fast_math)
    else:
        passes = gpu_schedule.kernel_passes(target)
    with target:
        return tvm.transform.Sequential(passes)(mod)


def tune(
    tasks: list[ms.ExtractedTask],
    database: ms.database.Database,
    trials: int,
    time_budget_s: float | None,
) -> None:
    """Tune ``tasks`` into ``database``, within ``trials`` candidates and ``time_budget_s``.

    Rounds of one kernel: each kernel once (its default schedule measured, then
    :data:`FIRST_ROUND_TRIALS` candidates), the most floating-point work first, then
    always the kernel where the graph's time goes (its weight times its best time so far;
    :data:`TRIALS_PER_ROUND` candidates). Each round is a ``tune_tasks`` call of its own,
    since MetaSchedule commits records only when its loop ends, and the next round's
    evolutionary search starts from the database's best. A kernel whose search finds no
    new candidate, or that did not get 3% faster in :data:`PATIENCE` rounds, is done.
    Kernels the budget does not reach get no record, so a later process tunes them. The
    deadline is checked before each round (no round starts that its search alone would
    take past it) and by the runner before each candidate (:mod:`torchkiln_tvm.measure`).
    """
    deadline = Deadline(time_budget_s)
    builder = SerializingBuilder()
    runner = WorkerRunner(builder, deadline, CANDIDATE_TIMEOUT_S)
    runner.worker.start()
    runner.worker.warm_up(str(tasks[0].target), min(WARM_UP_TIMEOUT_S, deadline.left()))
    _register_intrinsics(tasks[0].target)
    log.info("tvm: tuning %d kernels (%d trials, %s s budget)", len(tasks), trials, time_budget_s)
    first = sorted(tasks, key=lambda t: -t.weight * estimate_tir_flops(t.dispatched[0]))
    best = {t.task_name: float("inf") for t in tasks}
    stale = dict.fromkeys(best, 0)
    live = list(first)
    reached = 0
    search_s = 0.0  # the longest search of a round so far: a round needs that much time left
    try:
        while live and runner.trials < trials and deadline.left() > search_s:
            if first:
                task, size = first.pop(0), FIRST_ROUND_TRIALS
                reached += 1
                best[task.task_name] = baseline(task, database, runner)
            else:
                task = max(live, key=lambda t: t.weight * best[t.task_name])
                size = TRIALS_PER_ROUND
            measured, busy, started = runner.trials, runner.busy_s, time.monotonic()
            _round(task, database, builder, runner, min(size, trials - runner.trials))
            search_s = max(search_s, time.monotonic() - started - (runner.busy_s - busy))
            now = best_seconds(database, task)
            faster = now < best[task.task_name] * (1 - GAIN)
            stale[task.task_name] = 0 if faster else stale[task.task_name] + 1
            best[task.task_name] = min(now, best[task.task_name])
            if runner.trials == measured or stale[task.task_name] >= PATIENCE:
                live.remove(task)
    finally:
        runner.worker.stop()
    counters["tvm"]["tuning_trials"] += runner.trials
    counters["tvm"]["tuning_failed_trials"] += runner.failures
    counters["tvm"]["tuned_kernels"] += reached
    log.info(
        "tvm: tuned %d of %d kernels: %d trials (%d failed%s) in %.1f s (%.1f s building and "
        "timing)",
        reached,
        len(tasks),
        runner.trials,
        runner.failures,
        f", last: {runner.last_error}" if runner.failures else "",
        deadline.elapsed(),
        runner.busy_s,
    )


def baseline(task: ms.ExtractedTask, database: ms.database.Database, runner) -> float:
    """Measure ``task``'s kernel with the default schedule (:func:`default_schedule`) and
    put it in the records: a tuned schedule replaces it only where it is faster, and the
    first rounds go to the kernels where the time goes. Its seconds (inf: none)."""
    func = task.dispatched[0]["main"]
    sch = default_schedule(func, task.target)
    if sch is None:
        return float("inf")
    left = runner.deadline.left()
    if left <= 0:
        return float("inf")
    request = {
        "mod": tvm.ir.save_json(sch.mod),
        "target": str(task.target),
        "args": [a.as_json() for a in ArgInfo.from_prim_func(func)],
    }
    started = time.monotonic()
    seconds, error = runner.worker.measure(request, min(runner.timeout_s, left))
    runner.busy_s += time.monotonic() - started
    if error is not None:
        log.debug("tvm: the default schedule of %s failed: %s", task.task_name, error)
        return float("inf")
    workload = database.commit_workload(task.dispatched[0])
    database.commit_tuning_record(
        ms.database.TuningRecord(
            sch.trace,
            workload,
            run_secs=seconds,
            target=task.target,
            args_info=ArgInfo.from_prim_func(func),
        )
    )
    return sum(seconds) / len(seconds)


def default_schedule(func: tvm.tirx.PrimFunc, target: tvm.target.Target) -> s_tir.Schedule | None:
    """The schedule the build gives a kernel without a record: :class:`LoopOrder`'s on
    CPU, the first of dlight's GPU rules that takes it on CUDA."""
    if target.kind.name == "llvm":
        return LoopOrder().apply(func, target, False)
    for rule in gpu_schedule.default_rules():
        sch = rule.apply(func, target, False)
        if sch is not None:
            return sch
    return None


def best_seconds(database: ms.database.Database, task: ms.ExtractedTask) -> float:
    """The best mean time in the records of ``task``'s kernel (inf if none ran)."""
    mod = task.dispatched[0]
    if not database.has_workload(mod):
        return float("inf")
    top = database.get_top_k(database.commit_workload(mod), 1)
    if not top or not top[0].run_secs:
        return float("inf")
    seconds = [float(s) for s in top[0].run_secs]
    return sum(seconds) / len(seconds)


def design_space(target: tvm.target.Target) -> ms.space_generator.SpaceGenerator | str:
    """MetaSchedule's rules for ``target``'s kernels: the target's own on CPU; on CUDA the
    rules without tensor cores, since the kernels tuned are reductions (matmuls call
    cuBLAS, :mod:`torchkiln_tvm.extern`) and the tensor-core rules need TVM's CUDA
    intrinsics registered (~45 s of parsing, :func:`_register_intrinsics`)."""
    if target.kind.name == "llvm":
        return "post-order-apply"
    return ms.space_generator.PostOrderApply(
        sch_rules="cuda", postprocs="cuda", mutator_probs="cuda"
    )


def _round(task, database, builder, runner, trials: int) -> None:
    context = ms.TuneContext(
        mod=task.dispatched[0],
        target=task.target,
        space_generator=design_space(task.target),
        search_strategy=ms.search_strategy.EvolutionarySearch(**SEARCH),
        task_name=task.task_name,
        num_threads=1,
        logger=search_log,
    ).clone()
    ms.tune_tasks(
        tasks=[context],
        task_weights=[task.weight],
        work_dir=str(scratch_dir()),
        max_trials_global=trials,
        num_trials_per_iter=trials,
        builder=builder,
        runner=runner,
        database=database,
        cost_model="random",  # MetaSchedule's learned one needs xgboost
        # not RemoveBuildArtifact: the builder's artifacts are keys, not folders
        measure_callbacks=[ms.measure_callback.AddToDatabase()],
        task_scheduler=ms.task_scheduler.RoundRobin(),
    )


def _register_intrinsics(target: tvm.target.Target) -> None:
    """Register the tensor intrinsics MetaSchedule's rules for ``target`` name: the host's
    (x86 or Arm) on CPU, none on CUDA (its default rules, without tensor cores, name none).

    ``TuneContext`` imports the package ``tvm.s_tir.tensor_intrin``, whose ``__init__``
    registers the CUDA, ROCm, Hexagon and CPU ones: ~45 s of TVMScript parsing here.
    The package is put in ``sys.modules`` without running its ``__init__``, and only the
    host's module is imported into it (x86: 0.5 s; Arm: 3 s).
    """
    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        spec = importlib.util.find_spec(name)
        package = types.ModuleType(name)
        package.__spec__ = spec
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules[name] = package
    if target.kind.name == "llvm":
        arm = platform.machine().lower() in ("aarch64", "arm64")
        importlib.import_module(f"{name}.{'arm_cpu' if arm else 'x86'}")
