"""Runs a plan in worker processes, so that a crash or a hang costs one item, not the run.

Normally one worker runs every item, in order. A worker that dies (a
backend's segfault) or sits on one item past its budget plus a grace (stuck
in C code, where the in-process alarm can't reach) is killed; that item is
recorded as failed and a new worker starts at the next one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Seconds past an item's own budget before its worker is taken for hung and killed.
HANG_GRACE_S = 30.0
POLL_S = 0.2

OnResult = Callable[[int, dict[str, Any]], None]

#: glibc keeps freed memory for reuse instead of handing it back to the OS at once. Without
#: this, a step's large tensors are page-faulted in anew on every step and a median depends
#: on allocation order more than on the code measured (on this CPU, eager's chain step swung
#: between 10 and 33 ms from run to run). The environment can still override each value.
STEADY_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 32),
    "MALLOC_TOP_PAD_": str(1 << 28),
}


def failure(item: dict[str, Any], reason: str) -> dict[str, Any]:
    """The result an item gets when its worker died on it."""
    kind = item["kind"]
    if kind == "row":
        return {"model": item["model"], "case": item["case"], "variant": item["variant"],
                "status": "failed", "error": reason}  # fmt: skip
    if kind == "overhead":
        return {"ok": False, "error": reason}
    return {"error": reason}


def supervise(
    items: list[dict[str, Any]],
    config: dict[str, Any],
    workdir: Path,
    label: str,
    on_result: OnResult,
    worker: str = "benchmarks.worker",
) -> None:
    """Give every item a result through ``on_result(index, result)``, in order.

    ``worker`` is the module run as ``python -m WORKER PLAN.json RESULTS.jsonl``;
    it follows ``benchmarks.worker``'s protocol (a start line and a done line per item).
    """
    remaining = list(range(len(items)))
    attempt = 0
    hang_after = config["row_budget_s"] + HANG_GRACE_S
    while remaining:
        plan = workdir / f"{label}-{attempt}.plan.json"
        out = workdir / f"{label}-{attempt}.jsonl"
        plan.write_text(json.dumps({"config": config, "items": items, "todo": remaining}))
        cmd = [sys.executable, "-m", worker, str(plan), str(out)]
        proc = subprocess.Popen(cmd, env={**STEADY_MALLOC, **os.environ})
        current, reason = _watch(
            proc, out, remaining, on_result, hang_after, config.get("deadline")
        )
        if not remaining:
            return
        if current is None:
            for index in list(remaining):
                on_result(index, failure(items[index], f"worker: {reason}"))
            return
        remaining.remove(current)
        on_result(current, failure(items[current], reason))
        if reason.startswith("time budget"):
            for index in list(remaining):
                on_result(index, failure(items[index], "time budget spent") | {"status": "skipped"})
            return
        attempt += 1


def _watch(
    proc: subprocess.Popen,
    out: Path,
    remaining: list[int],
    on_result: OnResult,
    hang_after: float,
    deadline: float | None,
) -> tuple[int | None, str]:
    """Follow a worker until it exits: (the item it was on when it stopped, why it stopped)."""
    offset, current, started, reason = 0, None, 0.0, ""
    while True:
        exited = proc.poll() is not None
        records, offset = _read_new(out, offset)
        for record in records:
            if "start" in record:
                current, started = record["start"], record["time"]
            else:
                remaining.remove(record["done"])
                on_result(record["done"], record["result"])
                current = None
        if exited:
            break
        now = time.time()
        if current is not None and now - started > hang_after:
            reason = f"hung: worker killed after {now - started:.0f} s on this item"
        elif deadline is not None and now > deadline + HANG_GRACE_S:
            reason = "time budget spent: worker killed"
        if reason:
            proc.kill()
            proc.wait()
            return current, reason
        time.sleep(POLL_S)
    return current, _exit_reason(proc.returncode)


def _read_new(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete JSON lines appended since ``offset``."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode().splitlines()
    return [json.loads(line) for line in lines if line.strip()], offset + end


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"crashed: worker died with {name} on this item"
    return f"crashed: worker exited with code {code} on this item"
