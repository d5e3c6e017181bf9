"""The worker: checks a plan's programs in order, one JSON line per program.

    python -m benchmarks.capture_coverage.worker PLAN.json RESULTS.jsonl

Speaks ``benchmarks.worker``'s protocol (``{"start": i, "time": t}`` before a
program, ``{"done": i, "result": {...}}`` after it), so ``benchmarks.supervise``
can kill a worker that hangs or dies on one program and go on with the next.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from benchmarks.capture_coverage.check import check
from benchmarks.capture_coverage.corpus import load_corpus
from benchmarks.measure import time_limit
from benchmarks.worker import progress


def main(argv: list[str] | None = None) -> int:
    plan_path, out_path = (argv if argv is not None else sys.argv[1:])[:2]
    plan = json.loads(Path(plan_path).read_text())
    corpus = load_corpus()
    with open(out_path, "a") as out:
        for index in plan["todo"]:
            name = plan["items"][index]["name"]
            out.write(json.dumps({"start": index, "time": time.time()}) + "\n")
            out.flush()
            with time_limit(plan["config"]["row_budget_s"]):
                result = check(corpus[name])
            out.write(json.dumps({"done": index, "result": result}, default=repr) + "\n")
            out.flush()
            progress(f"{name}: {result['status']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
