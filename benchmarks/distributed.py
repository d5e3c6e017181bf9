"""DDP and FSDP2 training side by side (#25): eager, torch.compile and torchkiln in one run.

    python -m benchmarks.distributed --device cpu --size tiny --nproc 2
    python -m benchmarks.distributed --device cuda --json out.json --markdown out.md
    python -m benchmarks.distributed --report out.json      # the tables again, from the JSON

``--nproc`` processes (default: one per GPU; 2 on CPU) join one process group (NCCL on
cuda, gloo on cpu) and run every configuration, model x wrapper x variant, one after the
other in it: starting processes and a group costs seconds. Each configuration starts from
a fresh copy of the model (built once per process from the zoo's fixed seed), emptied
in-process compiler caches (``torch._dynamo.reset()``, ``torchkiln.reset()``) and fresh
cache folders (``benchmarks.caches``). The training step is the harness's
(``cases.make_workload``: forward, ``mean(out**2)``, backward, AdamW step; dtype and size
as ``benchmarks.run`` picks them); each rank trains on its own batch (the model's inputs
shuffled by a rank-seeded permutation), the same one at every step.

Wrappers: ``ddp`` (``DistributedDataParallel``, default buckets) and ``fsdp2``
(``fully_shard`` on each transformer block, the model's largest ``nn.ModuleList``, then on
the root, as torchtitan does). Variants: ``eager``; ``torch.compile`` and ``kiln:NAME``
(``torchkiln.compile(..., backend=NAME)``) applied at the same places: around the DDP
module, or to each block (``--fsdp2-order compile-first``: before ``fully_shard``, as
torchtitan does; ``shard-first``: after it).

Per configuration: **step ms** (the slowest rank's median of ``--reps`` steps after
``--warmup``, CUDA-synchronized), **speedup** over eager with the same wrapper,
**first-step s** (wrapping, compiling and one step), **peak MiB** (the largest rank's),
**max diff** (after ``--check-steps`` steps: the losses and every parameter, gathered
whole, against eager's with the same wrapper), torchkiln's DDP **subgraphs**, and on cuda
**comm ms** and **comm overlapped**: in one more step, profiled on rank 0, the time NCCL
kernels ran (their union; it includes waiting for the other ranks) and the share of it
during which compute kernels ran too. ``--traces`` keeps those profiles as chrome traces.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import math
import os
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.caches import compiler_caches
from benchmarks.cases import Workload, make_workload
from benchmarks.dynamic import pay_startup
from benchmarks.measure import PeakMemory, median, step_times_ms, synchronize
from benchmarks.models import MODELS, SEED, SIZES, Built
from benchmarks.results import FAILED, OK, SKIPPED
from benchmarks.rows import cache_dir_for, describe_error, on_device
from benchmarks.run import package_versions, select_models
from benchmarks.tables import fmt, markdown_table
from benchmarks.variants import EAGER, TORCH_COMPILE, TORCHKILN, Variant, parse_variant
from benchmarks.worker import progress

WRAPPERS = ("ddp", "fsdp2")
FSDP2_ORDERS = ("compile-first", "shard-first")
DEFAULT_MODELS = "nanogpt,hf_gpt2"
DEFAULT_VARIANTS = "eager,torch.compile,kiln:inductor"
#: A configuration is not started with less than this many seconds of the budget left.
MIN_CONFIG_S = 20.0


@dataclass
class Result:
    """One model x wrapper x variant. Times in ms (steps) and s (first step); memory in MiB."""

    model: str
    wrapper: str
    variant: str
    status: str = SKIPPED
    error: str = ""
    error_detail: str = ""
    step_ms: float | None = None
    rank_step_ms: list[float] = field(default_factory=list)
    reps: int = 0
    speedup: float | None = None
    first_step_s: float | None = None
    peak_mib: float | None = None
    loss_diff: float | None = None
    param_diff: float | None = None
    max_diff: float | None = None
    subgraphs: int | None = None
    graph_breaks: int | None = None
    comm_ms: float | None = None
    comm_overlap: float | None = None


# ---------------------------------------------------------------------------- one rank


@dataclass
class Rank:
    """What one process holds for the whole run."""

    rank: int
    world: int
    device: torch.device
    settings: dict[str, Any]
    mesh: Any = None
    phase: str = "setup"
    models: dict[str, Built | str] = field(default_factory=dict)
    #: eager's losses and parameters after the check steps, per (model, wrapper)
    references: dict[tuple[str, str], tuple[torch.Tensor, list[torch.Tensor]]] = field(
        default_factory=dict
    )

    def model(self, name: str) -> Built | str:
        """This rank's pristine model and batch, or why it failed to build (built once)."""
        if name not in self.models:
            try:
                built = MODELS[name].build(self.settings["size"])
                self.models[name] = Built(built.module, rank_inputs(built.inputs, self.rank))
            except Exception as e:
                self.models[name] = describe_error("build", e)
        return self.models[name]


def rank_inputs(inputs: tuple[torch.Tensor, ...], rank: int) -> tuple[torch.Tensor, ...]:
    """Each rank's own batch: the values of every input shuffled by a rank-seeded permutation
    (rank 0 keeps them), so that data parallelism averages gradients that differ."""
    if rank == 0:
        return inputs
    gen = torch.Generator().manual_seed(SEED + rank)
    return tuple(t.flatten()[torch.randperm(t.numel(), generator=gen)].view_as(t) for t in inputs)


def block_list(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The transformer blocks: the ``nn.ModuleList`` holding the most parameters."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no nn.ModuleList of blocks to shard")
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def wrap_ddp(model: torch.nn.Module, variant: Variant, r: Rank) -> tuple[torch.nn.Module, Any]:
    """(the module holding the parameters, what a step calls): the DDP module, compiled whole."""
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [r.device.index] if r.device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=device_ids)
    return ddp, variant.compile(ddp)


def wrap_fsdp2(model: torch.nn.Module, variant: Variant, r: Rank) -> tuple[torch.nn.Module, Any]:
    """(root, root): blocks compiled and ``fully_shard``-ed, then the root; torchtitan keeps
    the last block unsharded after forward, as its backward starts at once."""
    from torch.distributed.fsdp import fully_shard

    blocks = block_list(model)
    compile_first = r.settings["fsdp2_order"] == "compile-first"
    for i, block in enumerate(blocks):
        if compile_first:
            blocks[i] = block = variant.compile(block)
        fully_shard(block, mesh=r.mesh, reshard_after_forward=i < len(blocks) - 1)
    fully_shard(model, mesh=r.mesh)
    if not compile_first:
        for i, block in enumerate(blocks):
            blocks[i] = variant.compile(block)
    return model, model


WRAP = {"ddp": wrap_ddp, "fsdp2": wrap_fsdp2}


def full_params(module: torch.nn.Module) -> list[torch.Tensor]:
    """A copy of every parameter whole, in float32 on the CPU (FSDP2 keeps each rank's shard:
    gathered); a copy, as training goes on updating the parameters in place."""
    whole = (p.full_tensor() if hasattr(p, "full_tensor") else p for p in module.parameters())
    return [p.detach().to("cpu", torch.float32, copy=True) for p in whole]


def largest_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(((x - y).abs().max().item() for x, y in zip(a, b, strict=True)), default=0.0)


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals merged where they overlap, sorted."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def overlap_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two sorted lists of disjoint intervals."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def comm_overlap(events: Any) -> tuple[float, float | None]:
    """(ms of NCCL kernels, the share of it overlapped by compute kernels) from profiler events.

    Copies and memsets are neither: they are not compute.
    """
    comm, compute = [], []
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if e.name.startswith(("Memcpy", "Memset")):
            continue
        interval = (e.time_range.start, e.time_range.end)
        (comm if "nccl" in e.name.lower() else compute).append(interval)
    comm = union(comm)
    comm_us = sum(end - start for start, end in comm)
    if not comm_us:
        return 0.0, None
    return comm_us / 1e3, overlap_length(comm, union(compute)) / comm_us


def profile_step(step: Any, trace: Path | None) -> tuple[float, float | None]:
    """One step under torch.profiler: its communication time and overlap (see comm_overlap)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    return comm_overlap(prof.events())


def graph_breaks(variant: Variant) -> int:
    """The graph breaks the variant's compiler counted in this process so far."""
    if variant.kind == TORCH_COMPILE:
        from torch._dynamo.utils import counters

        return sum(counters["graph_break"].values())
    if variant.kind == TORCHKILN:
        import torchkiln

        return sum(torchkiln.counters["graph_break"].values())
    return 0


def kiln_subgraphs() -> int:
    """The subgraphs torchkiln split DDP graphs into at the buckets, since its last reset."""
    import torchkiln

    return torchkiln.counters["ddp"]["subgraphs"]


def first_step(
    r: Rank, wrapper: str, built: Built, variant: Variant
) -> tuple[torch.nn.Module, Workload, torch.Tensor, float]:
    """Wrap a fresh copy of the model, compile it and run one step: (the module holding the
    parameters, the workload, the step's loss, the seconds wrapping and the step took)."""
    local = on_device(built, r.device, getattr(torch, r.settings["dtype"]))
    synchronize(r.device)
    start = time.perf_counter()
    module, forward = WRAP[wrapper](local.module, variant, r)
    workload = make_workload(module, forward, local.inputs, "training")
    loss = workload.step()
    synchronize(r.device)
    return module, workload, loss, time.perf_counter() - start


def check(
    r: Rank, result: Result, module: torch.nn.Module, workload: Workload, first_loss: torch.Tensor
) -> None:
    """The remaining check steps, then the losses and parameters against eager's (eager's
    are kept as the reference of its model and wrapper)."""
    losses = [first_loss] + [workload.step() for _ in range(r.settings["check_steps"] - 1)]
    checked = (torch.stack(losses).to("cpu", torch.float32), full_params(module))
    key = (result.model, result.wrapper)
    if result.variant == EAGER:
        r.references[key] = checked
        return
    if key not in r.references:
        return
    losses_ref, params_ref = r.references[key]
    result.loss_diff = largest_diff([checked[0]], [losses_ref])
    result.param_diff = largest_diff(checked[1], params_ref)
    result.max_diff = max(result.loss_diff, result.param_diff)


def profiled_step(
    r: Rank, result: Result, variant: Variant, step: Any
) -> tuple[float | None, float | None]:
    """Every rank steps once more, rank 0 under the profiler: its communication figures."""
    if r.rank != 0:
        step()
        return None, None
    trace = None
    if r.settings["trace_dir"]:
        where = cache_dir_for(Path(r.settings["trace_dir"]), result.model, result.wrapper, variant)
        trace = where.with_suffix(".json")
    return profile_step(step, trace)


def measure(r: Rank, result: Result, built: Built, variant: Variant) -> None:
    """One configuration on this rank, into ``result``; ``r.phase`` says where it is."""
    s, device = r.settings, r.device
    memory = PeakMemory(device)
    memory.start()
    breaks = graph_breaks(variant)
    r.phase = "first step"
    module, workload, loss, result.first_step_s = first_step(r, result.wrapper, built, variant)
    r.phase = "check"
    check(r, result, module, workload, loss)
    r.phase = "steady state"
    times = step_times_ms(workload.step, device, s["warmup"], s["reps"], math.inf)
    result.step_ms, result.reps = median(times), len(times)
    result.peak_mib = memory.peak_mb()
    if device.type == "cuda":
        r.phase = "profile"
        result.comm_ms, result.comm_overlap = profiled_step(r, result, variant, workload.step)
    if variant.kind != EAGER:
        result.graph_breaks = graph_breaks(variant) - breaks
    if variant.kind == TORCHKILN:
        result.subgraphs = kiln_subgraphs()
    result.status = OK


def run_config(r: Rank, model: str, wrapper: str, label: str) -> Result:
    """One configuration on this rank, in its own cache folder; a failure is recorded."""
    result = Result(model, wrapper, label)
    built = r.model(model)
    if isinstance(built, str):
        result.status, result.error = FAILED, built
        return result
    variant = parse_variant(label)
    cache = cache_dir_for(Path(r.settings["cache_root"]) / f"rank{r.rank}", model, wrapper, variant)
    r.phase = "setup"
    try:
        with compiler_caches(cache):
            measure(r, result, built, variant)
    except Exception as e:
        result.status, result.error = FAILED, describe_error(r.phase, e)
        result.error_detail = traceback.format_exc()[-2000:]
    finally:
        gc.collect()
        if r.device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def merge(per_rank: list[Result]) -> Result:
    """One row from every rank's: the first failure, else the slowest rank's times, the largest
    memory and differences; communication as rank 0 profiled it."""
    row = copy.copy(per_rank[0])
    for rank, result in enumerate(per_rank):
        if result.status != OK:
            row.status, row.error_detail = result.status, result.error_detail
            row.error = f"rank {rank}: {result.error}"
            return row
    row.rank_step_ms = [r.step_ms for r in per_rank]
    for name in ("step_ms", "first_step_s", "peak_mib", "loss_diff", "param_diff", "max_diff"):
        values = [getattr(r, name) for r in per_rank if getattr(r, name) is not None]
        setattr(row, name, max(values) if values else None)
    return row


def out_of_time(r: Rank) -> bool:
    """Rank 0's word, the same on every rank: is the budget too short for one more configuration?"""
    deadline = r.settings["deadline"]
    verdict = [deadline is not None and time.time() > deadline - MIN_CONFIG_S]
    dist.broadcast_object_list(verdict, src=0)
    return verdict[0]


def init_rank(rank: int, s: dict[str, Any]) -> Rank:
    """Join the process group; the collective timeout keeps a hung configuration from
    hanging the run forever."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s["port"]))
    cuda = s["device"] == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.set_float32_matmul_precision("high")
    if s["threads"]:
        torch.set_num_threads(s["threads"])
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        rank=rank,
        world_size=s["nproc"],
        timeout=timedelta(seconds=s["collective_timeout_s"]),
    )
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (s["nproc"],))
    return Rank(rank, s["nproc"], device, s, mesh)


def run_rank(rank: int, s: dict[str, Any]) -> None:
    """Every configuration on this rank; rank 0 logs and rewrites the JSON after each."""
    r = init_rank(rank, s)
    log = progress if rank == 0 else (lambda message: None)
    log(f"{s['nproc']} ranks joined ({dist.get_backend()}); paying compilers' start-up")
    variants = [parse_variant(v) for v in s["variants"]]
    pay_startup(variants, r.device, Path(s["cache_root"]) / f"rank{rank}" / "startup")
    rows: list[Result] = []
    for model, wrapper, label in s["plan"]:
        if out_of_time(r):
            row = Result(model, wrapper, label, SKIPPED, "time budget spent")
        else:
            log(f"{model} {wrapper} {label}: start")
            gathered: list[Any] = [None] * r.world
            dist.all_gather_object(gathered, run_config(r, model, wrapper, label))
            row = merge(gathered)
        rows.append(row)
        log(f"{model} {wrapper} {label}: {describe_row(row)}")
        if rank == 0:
            save(Path(s["json"]), s["meta"], rows)
    dist.destroy_process_group()


def describe_row(row: Result) -> str:
    if row.status != OK:
        return f"{row.status}: {row.error}"
    return (
        f"{fmt(row.step_ms)} ms (ranks {', '.join(fmt(t) for t in row.rank_step_ms)}), "
        f"first step {fmt(row.first_step_s)} s, max diff {fmt(row.max_diff, digits=2)}"
    )


# ---------------------------------------------------------------------------- the report


def relate(rows: list[Result]) -> None:
    """Each row's speedup: eager's step time over its own, for the same model and wrapper."""
    eager = {(r.model, r.wrapper): r.step_ms for r in rows if r.variant == EAGER and r.status == OK}
    for r in rows:
        base = eager.get((r.model, r.wrapper))
        r.speedup = base / r.step_ms if base and r.status == OK and r.step_ms else None


def _find(rows: list[Result], model: str, wrapper: str, variant: str) -> Result | None:
    return next((r for r in rows if (r.model, r.wrapper, r.variant) == (model, wrapper, variant)), None)  # fmt: skip


def goal_lines(rows: list[Result]) -> list[str]:
    """Per model, wrapper and torchkiln variant, the goal of #25: its speedup over eager at
    least torch.compile's; PASS, FAIL, or INCOMPLETE where either did not run."""
    lines = []
    for r in rows:
        if parse_variant(r.variant).kind != TORCHKILN:
            continue
        where = f"{r.model} {r.wrapper}: {r.variant}"
        reference = _find(rows, r.model, r.wrapper, TORCH_COMPILE)
        missing = [x for x in (r, reference) if x is None or x.speedup is None]
        if missing:
            why = ", ".join(
                f"{TORCH_COMPILE}: not run" if x is None else f"{x.variant}: {x.status}"
                for x in missing
            )
            lines.append(f"{where}: INCOMPLETE ({why})")
            continue
        verdict = "PASS" if r.speedup >= reference.speedup else "FAIL"
        overlap = (
            f"comm overlapped {_percent(r.comm_overlap)} vs {_percent(reference.comm_overlap)}"
        )
        lines.append(
            f"{where} {fmt(r.speedup, 'x')} >= {TORCH_COMPILE} {fmt(reference.speedup, 'x')}: "
            f"{verdict} ({overlap})"
        )
    return lines


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _status_cell(r: Result) -> str:
    return fmt(r.step_ms) if r.status == OK else ("FAIL" if r.status == FAILED else "skip")


def results_table(rows: list[Result]) -> str:
    header = ["model", "wrapper", "variant", "step ms", "speedup", "first-step s", "peak MiB",
              "max diff", "graph breaks", "subgraphs", "comm ms", "comm overlapped"]  # fmt: skip
    body = [
        [
            r.model, r.wrapper, r.variant, _status_cell(r), fmt(r.speedup, "x"),
            fmt(r.first_step_s), fmt(r.peak_mib), fmt(r.max_diff, digits=2),
            _count(r.graph_breaks), _count(r.subgraphs), fmt(r.comm_ms),
            _percent(r.comm_overlap),
        ]
        for r in rows
    ]  # fmt: skip
    return markdown_table(header, body)


def render(document: dict[str, Any]) -> str:
    meta, rows = document["meta"], [Result(**row) for row in document["rows"]]
    lines = [
        f"## DDP / FSDP2 training (#25): {meta['nproc']} x {meta['device']} ({meta['where']}, "
        f"{meta['backend']}), size={meta['size']}, {meta['dtype']}, {meta['date_utc']}, "
        f"wall {meta.get('wall_s', math.nan):.0f} s, torch {meta['versions']['torch']}",
        f"step ms: the slowest rank's median of {meta['reps']} steps after {meta['warmup']}; "
        f"speedup: over eager with the same wrapper; max diff: losses and parameters after "
        f"{meta['check_steps']} steps against eager's; FSDP2 blocks compiled "
        f"{'before' if meta['fsdp2_order'] == 'compile-first' else 'after'} fully_shard. "
        + (
            "comm: NCCL kernel time in one step profiled on rank 0 (waiting for the other ranks "
            "included), overlapped: its share during compute kernels."
            if meta["device"] == "cuda"
            else "comm: not measured on cpu (gloo's collectives run on CPU threads, not kernels)."
        ),
    ]
    if meta["models_unavailable"]:
        lines.append("Models not available here: " + "; ".join(
            f"{k}: {v}" for k, v in meta["models_unavailable"].items()
        ))  # fmt: skip
    if meta.get("ranks_error"):
        lines.append(f"The ranks stopped early: {meta['ranks_error']}")
    lines.append(results_table(rows))
    failures = [f"- {r.model} {r.wrapper} {r.variant}: {r.error}" for r in rows if r.error]
    if failures:
        lines.append("Failed or skipped:\n" + "\n".join(failures))
    goals = goal_lines(rows) or ["(no torchkiln variant)"]
    lines.append(
        "### Goal (#25): torchkiln's speedup over eager >= torch.compile's\n\n"
        + "\n".join(f"- {line}" for line in goals)
    )
    return "\n\n".join(lines)


def save(path: Path, meta: dict[str, Any], rows: list[Result]) -> dict[str, Any]:
    """Write the run so far (rank 0 after every configuration, so a killed run keeps its rows)."""
    relate(rows)
    document = {"meta": meta, "rows": [asdict(r) for r in rows], "goals": goal_lines(rows)}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=1))
    tmp.replace(path)
    return document


# ---------------------------------------------------------------------------- the launcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.distributed", description=__doc__.split("\n")[0]
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--nproc", type=int, help="processes; default: the GPUs on cuda, 2 on cpu")
    p.add_argument("--models", default=DEFAULT_MODELS, help="comma list of zoo models")
    p.add_argument("--wrappers", default=",".join(WRAPPERS), help="comma list: ddp, fsdp2")
    p.add_argument("--variants", default=DEFAULT_VARIANTS,
                   help="comma list, as benchmarks.run's --backends; eager always runs first")  # fmt: skip
    p.add_argument("--fsdp2-order", choices=FSDP2_ORDERS, default="compile-first",
                   help="compile each block before fully_shard (torchtitan) or after it")  # fmt: skip
    p.add_argument("--size", choices=SIZES, help="default: small on cpu, large on cuda")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="default: float32 on cpu, bfloat16 on cuda")  # fmt: skip
    p.add_argument("--warmup", type=int, help="untimed steps; default 5 on cuda, 3 on cpu")
    p.add_argument("--reps", type=int, help="timed steps; default 30 on cuda, 20 on cpu")
    p.add_argument("--check-steps", type=int, default=3,
                   help="steps (the first one included) before comparing with eager")  # fmt: skip
    p.add_argument("--threads", type=int, help="torch CPU threads per rank; default 1 on cpu")
    p.add_argument("--time-budget", type=float,
                   help="seconds for the whole run (configurations past it are skipped)")  # fmt: skip
    p.add_argument("--collective-timeout", type=float, default=180.0,
                   help="seconds a collective may wait before the run fails (a hang guard)")  # fmt: skip
    p.add_argument("--json", type=Path, help="write every row here")
    p.add_argument("--markdown", type=Path, help="write the printed report here too")
    p.add_argument("--traces", type=Path, help="cuda: the profiled steps' chrome traces, .tar.gz")
    p.add_argument("--report", type=Path, help="print the report of a JSON written earlier")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    if args.check_steps < 1:
        p.error("--check-steps: give at least 1")
    return args


def plan(models: list[str], wrappers: list[str], variants: list[Variant]) -> list[tuple]:
    """Model by model, wrapper by wrapper, eager first: each row near the eager row it is
    compared with; when the budget runs out, the last models' rows are skipped."""
    return [(m, w, v.label) for m in models for w in wrappers for v in variants]


def select(args: argparse.Namespace) -> tuple[list[str], dict[str, str], list[str], list[Variant]]:
    models, unavailable = select_models(args.models)
    wrappers = [w.strip() for w in args.wrappers.split(",") if w.strip()]
    unknown = sorted(set(wrappers) - set(WRAPPERS))
    if unknown or not wrappers:
        raise SystemExit(f"--wrappers: unknown {', '.join(unknown) or '(none)'}; wrappers: "
                         f"{', '.join(WRAPPERS)}")  # fmt: skip
    labels = [v.strip() for v in args.variants.split(",") if v.strip()]
    variants = [parse_variant(v) for v in dict.fromkeys([EAGER, *labels])]
    return models, unavailable, wrappers, variants


def rank_settings(args: argparse.Namespace, root: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """What every rank needs to know (picklable)."""
    cuda = args.device == "cuda"
    return {
        "device": args.device, "nproc": meta["nproc"], "size": meta["size"],
        "dtype": meta["dtype"], "warmup": meta["warmup"], "reps": meta["reps"],
        "check_steps": args.check_steps, "threads": meta["threads"],
        "fsdp2_order": args.fsdp2_order, "variants": meta["variants"],
        "collective_timeout_s": args.collective_timeout, "port": free_port(),
        "cache_root": str(root), "json": str(args.json or root / "rows.json"),
        "trace_dir": str(root / "traces") if args.traces and cuda else "",
        "deadline": time.time() + args.time_budget if args.time_budget else None,
        "plan": meta["plan"], "meta": meta,
    }  # fmt: skip


def make_meta(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    cuda = args.device == "cuda"
    models, unavailable, wrappers, variants = select(args)
    nproc = args.nproc or (torch.cuda.device_count() if cuda else 2)
    return {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": argv, "device": args.device, "nproc": nproc,
        "backend": "nccl" if cuda else "gloo",
        "where": torch.cuda.get_device_name(0) if cuda else f"{os.cpu_count()} CPUs",
        "size": args.size or ("large" if cuda else "small"),
        "dtype": args.dtype or ("bfloat16" if cuda else "float32"),
        "warmup": args.warmup if args.warmup is not None else (5 if cuda else 3),
        "reps": args.reps or (30 if cuda else 20), "check_steps": args.check_steps,
        # One CPU thread per rank by default, as benchmarks.run: stable on a small shared host.
        "threads": args.threads or (None if cuda else 1), "fsdp2_order": args.fsdp2_order,
        "models": models, "models_unavailable": unavailable, "wrappers": wrappers,
        "variants": [v.label for v in variants], "plan": plan(models, wrappers, variants),
        "time_budget_s": args.time_budget, "versions": package_versions(),
    }  # fmt: skip


def start_ranks(settings: dict[str, Any]) -> str:
    """Run every rank to the end; what went wrong when one died or raised ("" when none did)."""
    try:
        mp.start_processes(
            run_rank, args=(settings,), nprocs=settings["nproc"], start_method="spawn"
        )
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[-1]}"
    return ""


def finish(meta: dict[str, Any], path: Path, ranks_error: str) -> list[Result]:
    """The rows rank 0 wrote, plus one per planned configuration it did not reach."""
    rows = []
    if path.exists():
        rows = [Result(**row) for row in json.loads(path.read_text())["rows"]]
    done = {(r.model, r.wrapper, r.variant) for r in rows}
    reason = f"not run: {ranks_error or 'the ranks ended early'}"
    rows += [Result(*c, FAILED, reason) for c in map(tuple, meta["plan"]) if c not in done]
    meta["ranks_error"] = ranks_error
    return rows


def pack_traces(directory: Path, archive: Path) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        for trace in sorted(directory.glob("*.json")):
            tar.add(trace, arcname=trace.name)


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    if args.report:
        print(render(json.loads(args.report.read_text())))
        return 0
    meta = make_meta(args, sys.argv if argv is None else argv)
    if args.device == "cpu":  # as benchmarks.run's workers: compile in-process, steady malloc
        from benchmarks.supervise import STEADY_MALLOC

        for key, value in {**STEADY_MALLOC, "TORCHINDUCTOR_COMPILE_THREADS": "1"}.items():
            os.environ.setdefault(key, value)
    root = Path(tempfile.mkdtemp(prefix="torchkiln-distributed-"))
    try:
        settings = rank_settings(args, root, meta)
        progress(f"{meta['nproc']} ranks; {len(meta['plan'])} configurations: models "
                 f"{', '.join(meta['models'])}; variants {', '.join(meta['variants'])}")  # fmt: skip
        rows = finish(meta, Path(settings["json"]), start_ranks(settings))
        meta["wall_s"] = time.monotonic() - started
        document = save(Path(settings["json"]), meta, rows)
        if settings["trace_dir"]:
            pack_traces(Path(settings["trace_dir"]), args.traces)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = render(document)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
