"""What a run measured: one ``Row`` per model x case x variant, geomeans, and the JSON file."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OK, FAILED, SKIPPED = "ok", "failed", "skipped"


@dataclass
class Row:
    """One model x case x variant. Times in ms (steps) and s (compiles); memory in MiB.

    ``median_ms`` is the row's own steady state. A non-eager row then times its
    steps alternately with a fresh eager copy of the model, one step each a
    round (``paired_ms``, ``paired_eager_ms``: the two medians over
    ``paired_reps`` rounds; ``paired_speedup``: the median over the rounds of
    the eager step's time over the row's), unless ``--no-paired`` or its budget
    ran out (``paired_error`` says why). ``speedup`` is the one the tables and
    geomeans use: ``paired_speedup`` when the row has one, else
    ``unpaired_speedup``, the eager row's own median over this row's.
    """

    model: str
    case: str
    variant: str
    status: str = SKIPPED
    error: str = ""
    error_detail: str = ""
    median_ms: float | None = None
    reps: int = 0
    speedup: float | None = None
    unpaired_speedup: float | None = None
    paired_ms: float | None = None
    paired_eager_ms: float | None = None
    paired_speedup: float | None = None
    paired_reps: int = 0
    paired_error: str = ""
    cold_compile_s: float | None = None
    warm_compile_s: float | None = None
    warm_compile_error: str = ""
    peak_mem_mb: float | None = None
    max_abs_diff: float | None = None
    achieved_gbps: float | None = None
    cache_dir: str = field(default="", repr=False)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_speedups(rows: list[Row]) -> dict[str, dict[str, dict[str, Any]]]:
    """case -> variant -> {speedup, rows_ok, rows}: geomean over the rows that ran."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for case in dict.fromkeys(r.case for r in rows):
        for variant in dict.fromkeys(r.variant for r in rows):
            mine = [r for r in rows if r.case == case and r.variant == variant]
            ok = [r.speedup for r in mine if r.status == OK and r.speedup]
            summary.setdefault(case, {})[variant] = {
                "speedup": geomean(ok),
                "rows_ok": len(ok),
                "rows": len(mine),
            }
    return summary


def _jsonable(value: Any) -> Any:
    """Non-finite floats become strings: JSON has no NaN or infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def write_json(path: Path, meta: dict[str, Any], rows: list[Row], extra: dict[str, Any]) -> None:
    """Write the whole run; called after every row so an interrupted run leaves its rows."""
    document = {
        "meta": meta,
        **extra,
        "geomean_speedup": geomean_speedups(rows),
        "rows": [asdict(r) for r in rows],
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_jsonable(document), indent=1, allow_nan=False))
    tmp.replace(path)
