"""The worker: runs a plan's items in order, in one process, one JSON line per item.

    python -m benchmarks.worker PLAN.json RESULTS.jsonl

``benchmarks.run`` writes the plan and supervises the worker. Before each
item the worker appends ``{"start": i, "time": t}``, after it ``{"done": i,
"result": {...}}``, so the supervisor knows which item a worker that died
(a backend's segfault) or hung (stuck inside one C call, where the
in-process alarm can't reach) was running; it records that item as failed
and starts a new worker on the next one.

Item kinds: ``overhead`` (per-call overhead of a variant), ``bandwidth``
(copy bandwidth at the memory-bound model's size), ``row`` (one model x
case x variant, cold caches) and ``warm`` (the first call again, caches
kept: run by a second worker after the rows).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.bandwidth import copy_bandwidth_gbps, tensor_bytes
from benchmarks.caches import compiler_caches
from benchmarks.measure import time_limit
from benchmarks.models import MODELS, Built
from benchmarks.overhead import per_call_overhead_us
from benchmarks.results import SKIPPED, Row
from benchmarks.rows import RowRunner, Settings, describe_error, first_step, on_device
from benchmarks.variants import parse_variant

#: A row is not started with less than this many seconds of budget left.
MIN_ROW_S = 5.0


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Worker:
    """Holds what items share: built models, eager references, the settings."""

    def __init__(self, config: dict[str, Any]):
        self.config = config
        device = torch.device(config["device"])
        if config.get("threads"):
            torch.set_num_threads(config["threads"])
        if device.type == "cuda":
            torch.set_float32_matmul_precision("high")
        self.settings = Settings(
            device=device,
            dtype=getattr(torch, config["dtype"]),
            warmup=config["warmup"],
            reps=config["reps"],
            step_budget_s=config["step_budget_s"],
            cache_root=Path(config["cache_root"]),
            paired=config.get("paired", True),
        )
        self.rows = RowRunner(self.settings)
        self.models: dict[str, Built | str] = {}

    def model(self, name: str) -> Built | str:
        """The pristine model rows copy, or why it failed to build (built once per worker)."""
        if name not in self.models:
            try:
                self.models[name] = MODELS[name].build(self.config["size"])
            except Exception as e:
                self.models[name] = describe_error("build", e)
        return self.models[name]

    def row_budget(self) -> float | None:
        """Seconds the next row may take: the per-row budget, or less near the deadline."""
        deadline = self.config.get("deadline")
        left = None if deadline is None else deadline - time.time()
        if left is not None and left < MIN_ROW_S:
            return None
        budget = self.config["row_budget_s"]
        return budget if left is None else min(budget, left)

    def run(self, item: dict[str, Any]) -> dict[str, Any]:
        kind = item["kind"]
        if kind == "overhead":
            return self.overhead(item)
        if kind == "bandwidth":
            return self.bandwidth(item)
        if kind == "row":
            return asdict(self.row(item))
        if kind == "warm":
            return self.warm(item)
        raise ValueError(f"unknown plan item kind {kind!r}")

    def overhead(self, item: dict[str, Any]) -> dict[str, Any]:
        try:
            with time_limit(self.config["row_budget_s"]), compiler_caches(self._scratch()):
                us = per_call_overhead_us(
                    parse_variant(item["variant"]), self.settings.device, item["calls"]
                )
            return {"ok": True, "us_per_call": us}
        except Exception as e:
            return {"ok": False, "error": describe_error("overhead", e)}

    def bandwidth(self, item: dict[str, Any]) -> dict[str, Any]:
        built = self.model(item["model"])
        if isinstance(built, str):
            return {"gbps": None, "error": built}
        s = self.settings
        nbytes = tensor_bytes(built.inputs) * s.dtype.itemsize // 4
        return {"gbps": copy_bandwidth_gbps(nbytes, s.device, s.dtype)}

    def row(self, item: dict[str, Any]) -> Row:
        built = self.model(item["model"])
        if isinstance(built, str):
            return Row(item["model"], item["case"], item["variant"], "failed", error=built)
        budget = self.row_budget()
        if budget is None:
            return Row(item["model"], item["case"], item["variant"], SKIPPED, "time budget spent")
        variant = parse_variant(item["variant"])
        return self.rows.run(item["model"], built, item["case"], variant, budget)

    def warm(self, item: dict[str, Any]) -> dict[str, Any]:
        built, budget = self.model(item["model"]), self.row_budget()
        if isinstance(built, str) or budget is None:
            return {"error": built if isinstance(built, str) else "time budget spent"}
        phase = "setup"
        try:
            with time_limit(budget), compiler_caches(Path(item["cache_dir"])):
                local = on_device(built, self.settings.device, self.settings.dtype)
                phase = "first step"
                variant = parse_variant(item["variant"])
                _, _, seconds = first_step(local, item["case"], variant, self.settings.device)
            return {"warm_compile_s": seconds}
        except Exception as e:
            return {"error": describe_error(phase, e), "detail": traceback.format_exc()[-1500:]}

    def _scratch(self) -> Path:
        return self.settings.cache_root / f"scratch-{os.getpid()}"


def main(argv: list[str] | None = None) -> int:
    plan_path, out_path = (argv if argv is not None else sys.argv[1:])[:2]
    plan = json.loads(Path(plan_path).read_text())
    if plan["config"]["device"] == "cpu":
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    worker = Worker(plan["config"])
    with open(out_path, "a") as out:
        for index in plan["todo"]:
            item = plan["items"][index]
            out.write(json.dumps({"start": index, "time": time.time()}) + "\n")
            out.flush()
            result = worker.run(item)
            out.write(json.dumps({"done": index, "result": result}) + "\n")
            out.flush()
            progress(_describe(item, result))
    return 0


def _describe(item: dict[str, Any], result: dict[str, Any]) -> str:
    what = " ".join(str(item[k]) for k in ("kind", "model", "case", "variant") if k in item)
    if item["kind"] == "row":
        ms, paired = result.get("median_ms"), result.get("paired_speedup")
        timing = f"{ms:.3g} ms" if ms else ""
        if paired:
            timing += f", paired: {result['paired_ms']:.3g} ms, {paired:.3g}x eager"
        return f"{what}: {result['status']} {timing} {result['error'] or result['paired_error']}"
    return f"{what}: {result}"


if __name__ == "__main__":
    raise SystemExit(main())
