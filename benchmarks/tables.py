"""The printed report: markdown tables, so they paste into benchmarks/README.md as they are."""

from __future__ import annotations

from typing import Any

from benchmarks.results import FAILED, OK, Row, geomean_speedups
from benchmarks.variants import EAGER


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body)]
    lines = [header, ["-" * w for w in widths], *body]
    return "\n".join(
        "| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths)) + " |" for line in lines
    )


def fmt(value: float | str | None, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):  # a non-finite float, as JSON keeps it
        return value
    if abs(value) >= 10**digits:
        return f"{value:.0f}{unit}"
    return f"{value:.{digits}g}{unit}"


def _status_cell(row: Row | None, ok_text: str) -> str:
    if row is None:
        return ""
    if row.status == OK:
        return ok_text
    return "FAIL" if row.status == FAILED else "skip"


def _by_key(rows: list[Row]) -> dict[tuple[str, str, str], Row]:
    return {(r.model, r.case, r.variant): r for r in rows}


def _model_cases(rows: list[Row]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r.model, r.case) for r in rows))


def _others(variants: list[str]) -> list[str]:
    return [v for v in variants if v != EAGER]


def speedup_table(rows: list[Row], variants: list[str]) -> str:
    """Eager ms, then each variant's speedup over eager; geomean rows per case at the end.

    A speedup is paired where the row has paired timing (``Row``); where some rows
    have it and others not, the unpaired ones are marked ``*``.
    """
    by_key = _by_key(rows)
    mark = "*" if any(_is_paired(r) for r in rows) else ""
    body = []
    for model, case in _model_cases(rows):
        eager = by_key.get((model, case, EAGER))
        eager_cell = (
            fmt(eager.median_ms) if eager and eager.status == OK else _status_cell(eager, "")
        )
        cells = [_speedup_cell(by_key.get((model, case, v)), mark) for v in _others(variants)]
        body.append([model, case, eager_cell, *cells])
    for case, per_variant in geomean_speedups(rows).items():
        cells = []
        for v in _others(variants):
            s = per_variant.get(v, {})
            cells.append(f"{fmt(s.get('speedup'), 'x')} ({s.get('rows_ok', 0)}/{s.get('rows', 0)})")
        body.append(["geomean", case, "", *cells])
    return markdown_table(["model", "case", "eager ms", *_others(variants)], body)


def speedup_note(rows: list[Row]) -> str:
    """How the speedups above were computed: paired, unpaired, or both."""
    compared = [r for r in rows if r.status == OK and r.variant != EAGER]
    paired = sum(_is_paired(r) for r in compared)
    how = (
        "Paired speedups: each row timed its steps alternately with a fresh eager copy "
        "of the model, one step of each a round, so that load drift hits both alike; "
        "the speedup is the median over the rounds of the copy's step time over the row's"
    )
    unpaired = "the eager row's median (eager ms) over the row's own median"
    if not paired:
        return f"Unpaired speedups: {unpaired}."
    if paired == len(compared):
        return how + "; eager ms is the eager row's own median."
    return f"{how}; `*`: no paired timing (see Details), {unpaired}."


def _is_paired(row: Row) -> bool:
    return row.paired_speedup is not None


def _speedup_cell(row: Row | None, unpaired_mark: str) -> str:
    if row is None:
        return ""
    mark = "" if _is_paired(row) else unpaired_mark
    return _status_cell(row, fmt(row.speedup, "x") + mark)


def compile_table(rows: list[Row], variants: list[str]) -> str:
    """Cold / warm compile seconds (the first call, which includes one step)."""
    by_key = _by_key(rows)
    body = []
    for model, case in _model_cases(rows):
        cells = []
        for v in _others(variants):
            row = by_key.get((model, case, v))
            text = f"{fmt(row.cold_compile_s)} / {fmt(row.warm_compile_s)}" if row else ""
            cells.append(_status_cell(row, text))
        body.append([model, case, *cells])
    return markdown_table(["model", "case", *[f"{v} cold/warm s" for v in _others(variants)]], body)


def details_table(rows: list[Row]) -> str:
    """Every row that ran: step times, both speedups, memory, difference from eager, bandwidth.

    ``ms`` is the row's own median; ``paired ms / eager`` the row's and the eager copy's
    medians in the paired rounds (and their number); ``speedup`` the one the tables use,
    ``unpaired`` the eager row's median over ``ms``. Rows without paired timing are listed
    below the table, with the reason.
    """
    body = [
        [
            r.model, r.case, r.variant, fmt(r.median_ms), str(r.reps), _paired_cell(r),
            fmt(r.speedup, "x"), fmt(r.unpaired_speedup, "x"), fmt(r.peak_mem_mb),
            fmt(r.max_abs_diff, digits=2), fmt(r.achieved_gbps),
        ]
        for r in rows
        if r.status == OK
    ]  # fmt: skip
    header = ["model", "case", "variant", "ms", "reps", "paired ms / eager", "speedup",
              "unpaired", "peak MiB", "max|diff|", "GB/s"]  # fmt: skip
    missing = [f"- {r.model}/{r.case} {r.variant}: {r.paired_error}" for r in rows
               if r.status == OK and r.paired_error]  # fmt: skip
    if not missing:
        return markdown_table(header, body)
    notes = "\n".join(["No paired timing (the speedup is unpaired):", *missing])
    return markdown_table(header, body) + "\n\n" + notes


def _paired_cell(row: Row) -> str:
    if not _is_paired(row):
        return "-"
    return f"{fmt(row.paired_ms)} / {fmt(row.paired_eager_ms)} ({row.paired_reps})"


def failures_table(rows: list[Row]) -> str:
    """One line per variant and distinct reason, with the rows it hit."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.status != OK:
            groups.setdefault((r.variant, r.error or r.status), []).append(f"{r.model}/{r.case}")
    body = [
        [
            variant,
            str(len(where)),
            ", ".join(where[:4]) + (" ..." if len(where) > 4 else ""),
            reason,
        ]
        for (variant, reason), where in groups.items()
    ]
    return markdown_table(["variant", "rows", "where", "reason"], body)


def overhead_table(overhead: dict[str, dict[str, Any]]) -> str:
    body = [
        [variant, fmt(r.get("us_per_call")) if r.get("ok") else "FAIL: " + r.get("error", "")]
        for variant, r in overhead.items()
    ]
    return markdown_table(["variant", "µs per call of x + 1"], body)


def bandwidth_table(rows: list[Row], copy_gbps: float | None) -> str:
    body = [
        [
            r.variant,
            fmt(r.achieved_gbps),
            fmt(100 * r.achieved_gbps / copy_gbps, "%") if copy_gbps else "-",
        ]
        for r in rows
        if r.achieved_gbps is not None
    ]
    return markdown_table(["variant", "chain GB/s", f"of copy ({fmt(copy_gbps)} GB/s)"], body)


def render(meta: dict[str, Any], rows: list[Row], extra: dict[str, Any]) -> str:
    """The whole printed report of a run: a header line, then the tables."""
    rows = sorted(rows, key=_row_order(meta))
    variants = meta["variants"]
    machine = meta["machine"]
    where = (
        machine.get("gpu") or f"{machine['cpu_count']} CPUs, {machine['torch_threads']} thread(s)"
    )
    load = machine["loadavg_start"][0], machine.get("loadavg_end", [float("nan")])[0]
    lines = [
        f"## {meta['device']} ({where}), size={meta['size']}, {meta['dtype']}, "
        f"{meta['date_utc']}, wall {meta.get('wall_s', float('nan')):.0f} s, "
        f"load average {load[0]:.1f} -> {load[1]:.1f}, torch {meta['versions']['torch']}"
    ]
    if meta.get("merged_runs"):
        lines.append(
            f"Merged from {len(meta['merged_runs'])} runs: {', '.join(meta['merged_runs'])}"
        )
    if meta["models_unavailable"]:
        missing = "; ".join(f"{k}: {v}" for k, v in meta["models_unavailable"].items())
        lines.append(f"Models not available here: {missing}")
    if meta["kiln_backends_unusable"]:
        unusable = "; ".join(f"{k}: {v}" for k, v in meta["kiln_backends_unusable"].items())
        lines.append(f"torchkiln backends not usable here: {unusable}")
    sections = [
        (
            "Speedup over eager (geomean: rows that ran / all)",
            speedup_table(rows, variants) + "\n\n" + speedup_note(rows),
        ),
        ("Compile time, cold / warm (s, first call incl. one step)", compile_table(rows, variants)),
        ("Details", details_table(rows)),
        ("Per-call overhead", overhead_table(extra["overhead_us"])),
    ]
    if any(r.achieved_gbps is not None for r in rows):
        bandwidth = bandwidth_table(rows, extra["copy_bandwidth_gbps"])
        sections.append(("Memory-bound chain, inference", bandwidth))
    if any(r.status != OK for r in rows):
        sections.append(("Failed or skipped", failures_table(rows)))
    lines += [f"### {title}\n\n{table}" for title, table in sections]
    return "\n\n".join(lines)


def _row_order(meta: dict[str, Any]) -> Any:
    models = {m: i for i, m in enumerate(meta.get("models", []))}
    cases = {c: i for i, c in enumerate(meta.get("cases", []))}
    variants = {v: i for i, v in enumerate(meta["variants"])}
    return lambda r: (models.get(r.model, 99), cases.get(r.case, 99), variants.get(r.variant, 99))
