"""Capture coverage: of the programs torch.compile captures in one graph, how many torchkiln does.

    python -m benchmarks.capture_coverage [--filter REGEX] [--json out.json]

Every program of ``benchmarks/capture_coverage/corpus/`` runs eagerly, under
``torch.compile(fullgraph=True)`` and under ``torchkiln.compile(fullgraph=True)``
(``check.py`` says how each is classified), in a supervised worker process so
that a crash or a hang costs one program, not the run. Prints counts, the
captured-correct rate, the top break reasons and every wrong result and crash.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from benchmarks.caches import cache_env
from benchmarks.capture_coverage.corpus import load_corpus
from benchmarks.capture_coverage.report import render, summarize
from benchmarks.supervise import supervise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capture_coverage")
    parser.add_argument("--filter", default="", help="only programs whose name matches this regex")
    parser.add_argument("--json", type=Path, help="write every program's outcome and the summary")
    parser.add_argument("--program-budget", type=float, default=60.0,
                        help="seconds one program may take before it counts as a timeout")  # fmt: skip
    parser.add_argument("--top", type=int, default=15, help="how many break reasons to list")
    args = parser.parse_args(argv)

    names = [n for n in load_corpus() if re.search(args.filter, n)]
    if not names:
        parser.error(f"no corpus program matches --filter {args.filter!r}")
    results = run(names, args.program_budget)
    summary = summarize(results, args.top)
    print(render(summary, results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        document = {"meta": _meta(args), "summary": summary, "programs": results}
        args.json.write_text(json.dumps(document, indent=1, default=repr))
    return 0


def run(names: list[str], budget_s: float) -> dict[str, dict[str, Any]]:
    """Each program's outcome, by name, from supervised workers with their own compiler caches."""
    items = [{"kind": "program", "name": n} for n in names]
    results: dict[str, dict[str, Any]] = {}

    def on_result(index: int, result: dict[str, Any]) -> None:
        if "status" not in result:  # the supervisor's record of a worker that died on it
            result = {"status": "timeout", "phase": "worker", **result}
        results[names[index]] = result

    with tempfile.TemporaryDirectory(prefix="capture-coverage-") as tmp:
        env = {**cache_env(Path(tmp)), "TORCHKILN_PERSIST_CAPTURES": "0"}
        with mock.patch.dict(os.environ, env):
            supervise(items, {"row_budget_s": budget_s}, Path(tmp), "coverage", on_result,
                      worker="benchmarks.capture_coverage.worker")  # fmt: skip
    return results


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "filter": args.filter,
        "program_budget_s": args.program_budget,
    }


if __name__ == "__main__":
    raise SystemExit(main())
