"""Summaries of ``variants_per_kernel.py``'s JSON files (``per-kernel/run-*``).

Per variant, over the kernels that have it (``serial``: the kernels the heuristic runs with
OpenMP; ``simd*``: those with a reduction): quantiles of its time / the heuristic's, and
the share of kernels it sped up by over 10% or slowed by over 10%. Then, per model and case,
the kernels' total time if each kernel ran the fastest of the heuristic and a set of
variants, over the heuristic's total.

    python benchmarks/results/cpu-2026-11-29e-cpp-autotune/per_kernel_summary.py \\
        benchmarks/results/cpu-2026-11-29e-cpp-autotune/per-kernel/run-b
"""

from __future__ import annotations

import glob
import json
import math
import sys
from pathlib import Path

SETS = {
    "same": ["same"],
    "serial": ["serial"],
    "simd16": ["simd16"],
    "kept": ["serial", "simd16", "serial+simd16", "simd8", "serial+simd8"],
    "kept+unroll": ["serial", "simd16", "serial+simd16", "simd8", "serial+simd8", "unroll"],
}


def applies(label: str, row: dict) -> bool:
    """Whether variant ``label`` changes ``row``'s kernel (a ``+`` joins parts)."""
    parts = label.split("+")
    if all(p in ("serial",) or p.startswith("simd") for p in parts):
        return any(row["parallel"] if p == "serial" else row["reduction"] for p in parts)
    return True


def main(folder: str) -> None:
    files = sorted(glob.glob(f"{folder}/res_*.json"))
    rows = [row for path in files for row in json.loads(Path(path).read_text())]
    labels = sorted({label for row in rows for label in row["us"]} - {"base"})
    print("| variant | kernels | p10 | median | p90 | < 0.9x | > 1.1x |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label in labels:
        ratios = sorted(
            r["us"][label] / r["us"]["base"] for r in rows if label in r["us"] and applies(label, r)
        )
        if not ratios:
            continue
        q = [ratios[int(f * (len(ratios) - 1))] for f in (0.1, 0.5, 0.9)]
        fast = sum(x < 0.9 for x in ratios) / len(ratios)
        slow = sum(x > 1.1 for x in ratios) / len(ratios)
        print(
            f"| {label} | {len(ratios)} | {q[0]:.3f} | {q[1]:.3f} | {q[2]:.3f} | "
            f"{fast:.0%} | {slow:.0%} |"
        )
    print()
    print("| model | case | heuristic us | " + " | ".join(SETS) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in SETS) + " |")
    for path in files:
        kernels = json.loads(Path(path).read_text())
        base = sum(r["us"]["base"] for r in kernels)
        cells = []
        for variants in SETS.values():
            best = sum(
                min(r["us"]["base"], *(r["us"].get(v, math.inf) for v in variants)) for r in kernels
            )
            cells.append(f"{best / base:.3f}")
        model, case = Path(path).stem.removeprefix("res_").rsplit("_t", 1)[0].rsplit("_", 1)
        print(f"| {model} | {case} | {base:.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
