"""The before/after table of this folder's harness runs (``training-{before,after}-N.json``)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

HERE = Path(__file__).parent
MODELS = ["mlp", "nanogpt", "chain", "convnet", "hf_gpt2", "hf_bert", "hf_llama", "timm_vit"]


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> None:
    runs = {}
    for kind in ("before", "after"):
        for path in sorted(HERE.glob(f"training-{kind}-*.json")):
            rows = json.loads(path.read_text())["rows"]
            runs[path.stem] = {r["model"]: r for r in rows if r["variant"] == "kiln:openvino"}
    names = list(runs)
    print("| model | " + " | ".join(names) + " | before median | after median |")
    print("| --- " * (len(names) + 3) + "|")
    medians: dict[str, list[float]] = {"before": [], "after": []}
    for model in MODELS:
        speedups = {n: runs[n][model]["speedup"] for n in names}
        row = [f"{speedups[n]:.3f}x" for n in names]
        for kind in medians:
            medians[kind].append(statistics.median(s for n, s in speedups.items() if kind in n))
        print(
            f"| {model} | " + " | ".join(row) + f" | {medians['before'][-1]:.3f}x | "
            f"{medians['after'][-1]:.3f}x |"
        )
    per_run = [f"{geomean([runs[n][m]['speedup'] for m in MODELS]):.3f}x" for n in names]
    print(
        "| geomean | " + " | ".join(per_run) + f" | {geomean(medians['before']):.3f}x | "
        f"{geomean(medians['after']):.3f}x |"
    )
    worst = max(runs[n][m]["max_abs_diff"] or 0 for n in names for m in MODELS)
    print(f"\nlargest max|diff| against eager (loss and every gradient), any run: {worst:.2g}")


if __name__ == "__main__":
    main()
