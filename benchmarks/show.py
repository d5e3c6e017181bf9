"""Print the tables of results JSONs again: ``python -m benchmarks.show out.json [more.json ...]``.

For a run that was cut short (its JSON is rewritten after every row), and
for pasting a GPU run's tables into benchmarks/README.md. Several files (a
GPU run split over calls, e.g. by ``BENCH_MODELS``) print as one report: a
row measured in a later file replaces the same model x case x variant of an
earlier one unless the later one was skipped; the header and the per-call
overhead come from the first file, and a line lists every run merged.
Each row keeps the speedup its run stored: paired where the row was timed
paired (its own eager copy, so it holds in a merged report too), else
unpaired, over its own run's eager row (see ``results.Row``); runs from
before paired timing print as unpaired.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.results import SKIPPED, Row
from benchmarks.tables import render


def merge(documents: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Row], dict[str, Any]]:
    """(meta, rows, extra) of one report built from several runs' documents."""
    first = documents[0]
    meta = dict(first["meta"])
    variants: dict[str, None] = {}
    rows: dict[tuple[str, str, str], Row] = {}
    for document in documents:
        variants.update(dict.fromkeys(document["meta"]["variants"]))
        for r in document["rows"]:
            row = Row(**r)
            key = (row.model, row.case, row.variant)
            if key not in rows or row.status != SKIPPED:
                rows[key] = row
    meta["variants"] = list(variants)
    if len(documents) > 1:
        meta["merged_runs"] = [d["meta"]["date_utc"] for d in documents]
    return meta, list(rows.values()), first


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if not args:
        raise SystemExit("usage: python -m benchmarks.show RESULTS.json [MORE.json ...]")
    meta, rows, extra = merge([json.loads(Path(a).read_text()) for a in args])
    print(render(meta, rows, extra))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
