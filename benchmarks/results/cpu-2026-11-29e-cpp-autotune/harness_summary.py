"""The harness runs of this folder side by side: per row, each run's paired speedup over
eager of kiln:inductor (default) and of max-autotune-no-cudagraphs, their ratio per run and
its median, and the cold compile times (medians).

    python benchmarks/results/cpu-2026-11-29e-cpp-autotune/harness_summary.py \\
        benchmarks/results/cpu-2026-11-29e-cpp-autotune/run*.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

DEFAULT, TUNED = "kiln:inductor", "kiln:inductor:max-autotune-no-cudagraphs"


def main(paths: list[str]) -> None:
    runs = [json.loads(Path(p).read_text())["rows"] for p in paths]
    keys = list(dict.fromkeys((r["model"], r["case"]) for r in runs[0]))
    print(
        "| model | case | default x eager | max-autotune x eager | max-autotune / default "
        "(per run) | median | cold compile s, default / max-autotune |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    medians: dict[str, list[float]] = {"inference": [], "training": []}
    for model, case in keys:
        rows = [
            {r["variant"]: r for r in run if (r["model"], r["case"]) == (model, case)}
            for run in runs
        ]
        default = [r[DEFAULT]["speedup"] for r in rows]
        tuned = [r[TUNED]["speedup"] for r in rows]
        ratios = [t / d for t, d in zip(tuned, default, strict=True)]
        median = statistics.median(ratios)
        medians[case].append(median)
        cold_d = statistics.median(r[DEFAULT]["cold_compile_s"] for r in rows)
        cold_t = statistics.median(r[TUNED]["cold_compile_s"] for r in rows)
        print(
            f"| {model} | {case} | {' '.join(f'{x:.2f}' for x in default)} | "
            f"{' '.join(f'{x:.2f}' for x in tuned)} | {' '.join(f'{x:.3f}' for x in ratios)} | "
            f"{median:.3f} | {cold_d:.1f} / {cold_t:.1f} |"
        )
    for case, values in medians.items():
        geomean = math.exp(sum(map(math.log, values)) / len(values))
        print(f"| geomean | {case} | | | | {geomean:.3f} | |")


if __name__ == "__main__":
    main(sys.argv[1:])
