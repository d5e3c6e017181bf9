"""The harness: every model x case x variant side by side, in one run.

    python -m benchmarks.run --device cpu --quick
    python -m benchmarks.run --device cuda --backends eager,torch.compile,inductor \
        --models mlp,hf_gpt2 --json out.json

One worker process measures everything, in order: the per-call overhead of
each variant (which also pays each compiler's one-time start-up, so that the
first row's cold compile is not charged for importing inductor), the copy
bandwidth, then every row (a non-eager row is timed alone, then alternately
with a fresh eager copy of the model, and its speedup comes from those paired
rounds: see ``rows``; ``--no-paired`` leaves them out). A second worker then
measures warm compiles with the caches the rows left. This process only
plans, supervises (a worker that crashes or hangs costs the item it was on,
see ``supervise``), and reports; the JSON is rewritten after every row. See
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks import tables
from benchmarks.cases import CASES
from benchmarks.models import MODELS, SIZES, group
from benchmarks.results import OK, Row, write_json
from benchmarks.rows import MEMORY_BOUND_MODEL, cache_dir_for
from benchmarks.supervise import supervise
from benchmarks.variants import EAGER, Variant, discover_kiln_backends, select_variants

#: Share of the time budget kept back for the warm-compile worker (none with --quick,
#: where covering every row comes first).
WARM_SHARE = 0.15


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--backends", default="all", help="comma list; 'all' = eager, torch.compile "
                   "(+ reduce-overhead on cuda) and every usable torchkiln backend")  # fmt: skip
    p.add_argument(
        "--models",
        default="all",
        help=f"all (the zoo), suite (the model suite's), or a comma list of: {', '.join(MODELS)}",
    )
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--size", choices=SIZES, help="default: small on cpu, large on cuda")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="default: float32 on cpu, bfloat16 on cuda")  # fmt: skip
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", type=Path, help="write the printed tables here too")
    p.add_argument("--quick", action="store_true", help="few steps, 9-minute budget")
    p.add_argument(
        "--time-budget", type=float, help="seconds for the whole run (rows past it are skipped)"
    )
    p.add_argument("--row-budget", type=float, help="seconds one row may take before it is failed")
    p.add_argument("--warmup", type=int)
    p.add_argument("--reps", type=int)
    p.add_argument("--no-warm", action="store_true", help="skip the warm-compile process")
    p.add_argument("--no-paired", action="store_true", help="time each row alone only, not also "
                   "alternately with a fresh eager copy: quicker, but each speedup then divides "
                   "medians taken minutes apart")  # fmt: skip
    p.add_argument("--keep-caches", type=Path, help="use this cache root and keep it")
    p.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads; default 1 on cpu (stable on a shared host), torch's own on cuda",
    )
    return p.parse_args(argv)


def select_models(spec: str) -> tuple[list[str], dict[str, str]]:
    """Model names from ``--models``: ``all`` (the zoo), ``suite`` (the model suite's), or a list."""
    if spec in ("all", "suite"):
        names = group("zoo" if spec == "all" else spec)
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; models: {', '.join(MODELS)}")
    unavailable = {n: r for n in names if (r := MODELS[n].unavailable_reason())}
    return [n for n in names if n not in unavailable], unavailable


def package_versions() -> dict[str, str]:
    versions = {"torch": torch.__version__}
    for name in ("torchkiln", "transformers", "torchvision", "timm", "triton"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def machine(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": config["threads"] or torch.get_num_threads(),
        "loadavg_start": os.getloadavg(),
    }
    if args.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def schedule(
    model_names: list[str], cases: list[str], variants: list[Variant]
) -> list[tuple[str, str, Variant]]:
    """Row order: model by model and case by case, eager first, so that each row is timed
    minutes at most from the eager row its unpaired speedup is over (the load of a shared
    host drifts); the CUDA-graph variants in a last pass over the models.

    When the time budget runs out, what is skipped is the last models' rows.
    """
    plain = [v for v in variants if not v.replays_cuda_graphs]
    graphs = [v for v in variants if v.replays_cuda_graphs]
    return [
        (m, c, v) for group in (plain, graphs) for m in model_names for c in cases for v in group
    ]


def worker_config(args: argparse.Namespace, cache_root: Path) -> dict[str, Any]:
    """Everything a worker needs to know, as JSON."""
    cuda = args.device == "cuda"
    default_warmup, default_reps = (1, 10) if args.quick else ((5, 30) if cuda else (3, 20))
    return {
        "device": args.device,
        "dtype": args.dtype or ("bfloat16" if cuda else "float32"),
        "size": args.size or ("large" if cuda else "small"),
        # One CPU thread by default: on a small shared host, two OpenMP threads stall
        # for whole scheduler slices whenever another process holds a core.
        "threads": args.threads or (None if cuda else 1),
        "warmup": default_warmup if args.warmup is None else args.warmup,
        "reps": default_reps if args.reps is None else args.reps,
        "step_budget_s": 1.5 if args.quick else 3.0,
        "paired": not args.no_paired,
        "row_budget_s": args.row_budget or (90.0 if args.quick else 300.0),
        "cache_root": str(cache_root),
        "deadline": None,
    }


def plan_items(
    variants: list[Variant], model_names: list[str], cases: list[str], quick: bool, root: Path
) -> list[dict[str, Any]]:
    calls = 200 if quick else 1000
    items: list[dict[str, Any]] = [
        {"kind": "overhead", "variant": v.label, "calls": calls} for v in variants
    ]
    if MEMORY_BOUND_MODEL in model_names:
        items.append({"kind": "bandwidth", "model": MEMORY_BOUND_MODEL})
    for model, case, variant in schedule(model_names, cases, variants):
        cache_dir = str(cache_dir_for(root, model, case, variant))
        items.append({"kind": "row", "model": model, "case": case, "variant": variant.label,
                      "cache_dir": cache_dir})  # fmt: skip
    return items


def relate_to_eager(rows: list[Row]) -> None:
    """Each row's speedups over eager for the same model and case: see ``Row``."""
    eager = {(r.model, r.case): r.median_ms for r in rows if r.variant == EAGER and r.status == OK}
    for r in rows:
        base, ok = eager.get((r.model, r.case)), r.status == OK
        r.unpaired_speedup = base / r.median_ms if base and ok and r.median_ms else None
        r.speedup = r.paired_speedup if ok and r.paired_speedup else r.unpaired_speedup


def main(argv: list[str] | None = None) -> int:
    started, started_epoch = time.monotonic(), time.time()
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available")
    budget = args.time_budget or (540.0 if args.quick else None)
    cache_root = args.keep_caches or Path(tempfile.mkdtemp(prefix="torchkiln-bench-"))
    cache_root.mkdir(parents=True, exist_ok=True)
    config = worker_config(args, cache_root)
    kiln = discover_kiln_backends(args.device)
    variants = select_variants(args.backends, args.device, kiln)
    model_names, unavailable = select_models(args.models)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    meta = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": sys.argv if argv is None else argv,
        "device": args.device, "size": config["size"], "dtype": f"torch.{config['dtype']}",
        "quick": args.quick, "warmup": config["warmup"], "reps": config["reps"],
        "paired": config["paired"],
        "threads": config["threads"], "time_budget_s": budget, "machine": machine(args, config),
        "versions": package_versions(), "variants": [v.label for v in variants],
        "models": model_names, "cases": cases, "models_unavailable": unavailable,
        "kiln_backends_unusable": kiln.unusable, "kiln_plugin_failures": kiln.plugin_failures,
    }  # fmt: skip
    print(f"[bench] variants: {', '.join(meta['variants'])}; models: {', '.join(model_names)}",
          file=sys.stderr, flush=True)  # fmt: skip
    extra: dict[str, Any] = {"overhead_us": {}, "copy_bandwidth_gbps": None}
    rows: list[Row] = []

    def save() -> None:
        relate_to_eager(rows)
        if args.json:
            write_json(args.json, meta, rows, extra)

    items = plan_items(variants, model_names, cases, args.quick, cache_root)

    def on_result(index: int, result: dict[str, Any]) -> None:
        item = items[index]
        if item["kind"] == "overhead":
            extra["overhead_us"][item["variant"]] = result
        elif item["kind"] == "bandwidth":
            extra["copy_bandwidth_gbps"] = result.get("gbps")
        else:
            rows.append(Row(**result))
        save()

    try:
        if budget is not None:
            warm_share = 0.0 if args.quick else WARM_SHARE
            config["deadline"] = started_epoch + budget * (1 - warm_share)
        supervise(items, config, cache_root, "rows", on_result)
        if budget is not None:
            config["deadline"] = started_epoch + budget - 5
        measure_warm_compiles(rows, variants, config, cache_root, args.no_warm)
        meta["machine"]["loadavg_end"] = os.getloadavg()
        meta["wall_s"] = time.monotonic() - started
        save()
        text = tables.render(meta, rows, extra)
        print(text)
        if args.markdown:
            args.markdown.write_text(text + "\n")
    finally:
        if args.keep_caches is None:
            shutil.rmtree(cache_root, ignore_errors=True)
    return 0


def measure_warm_compiles(
    rows: list[Row], variants: list[Variant], config: dict[str, Any], root: Path, skip: bool
) -> None:
    """A second worker compiles every row that compiled again, its caches kept."""
    todo = [r for r in rows if r.status == OK and r.variant != EAGER]
    deadline = config.get("deadline")
    if skip or (deadline is not None and deadline - time.time() < 10) or not todo:
        for r in todo:
            r.warm_compile_error = "not measured (--no-warm)" if skip else "time budget spent"
        return
    # The same one-time start-up as the rows' worker paid, before timing anything.
    startup = [{"kind": "overhead", "variant": v.label, "calls": 1} for v in variants]
    items = startup + [
        {"kind": "warm", "model": r.model, "case": r.case, "variant": r.variant, "cache_dir": r.cache_dir}
        for r in todo
    ]  # fmt: skip

    def on_result(index: int, result: dict[str, Any]) -> None:
        if index >= len(startup):
            row = todo[index - len(startup)]
            row.warm_compile_s = result.get("warm_compile_s")
            row.warm_compile_error = result.get("error", "")

    supervise(items, config, root, "warm", on_result)


if __name__ == "__main__":
    raise SystemExit(main())
