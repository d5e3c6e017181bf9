"""In-process A/B of ``Capabilities.saves_for_others`` on one model's training step.

    TORCHKILN_CACHE_DIR=$(mktemp -d) MALLOC_MMAP_THRESHOLD_=1073741824 \\
    MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456 PYTHONPATH=. \\
    .venv/bin/python benchmarks/results/cpu-2026-11-29e-openvino-training/ab_saves_for_others.py \\
    chain 25

Three deep copies of the model train side by side (AdamW): eager, kiln:openvino with the
plain min cut ("off": ``MaterializingMinCut`` swapped for ``min_cut_partition`` while it
compiles) and kiln:openvino as it is ("on"); 3 warm-up steps, then ROUNDS rounds of one
step each, the order reversed every round. Prints the values each forced to be saved,
the medians, and the median over rounds of off's step time over on's (wall and process
CPU time).
"""

from __future__ import annotations

import copy
import statistics
import sys
import time

import torch

import torchkiln.aot.partition as partition
from benchmarks.cases import make_workload
from benchmarks.models import MODELS
from benchmarks.variants import parse_variant

torch.set_num_threads(1)
MATERIALIZING = partition.MaterializingMinCut
forced: list[str] = []
written_for_others = partition._written_for_others


def recording(node, dependent, materialized) -> bool:
    saved = written_for_others(node, dependent, materialized)
    if saved:
        forced.append(str(node.target))
    return saved


class PlainMinCut:
    cache_name = "plain-min-cut"

    def __init__(self, materialized):
        pass

    def __call__(self, joint_gm, num_fwd_outputs):
        return partition.min_cut_partition(joint_gm, num_fwd_outputs)


def main(name: str, rounds: int) -> None:
    partition._written_for_others = recording
    built = MODELS[name].build("small")
    steps = {}
    for label in ("eager", "off", "on"):
        module = copy.deepcopy(built.module)
        partition.MaterializingMinCut = PlainMinCut if label == "off" else MATERIALIZING
        forward = module if label == "eager" else parse_variant("kiln:openvino").compile(module)
        steps[label] = make_workload(module, forward, built.inputs, "training")
        for _ in range(3):  # compiles under the partitioner chosen above
            steps[label].step()
    partition.MaterializingMinCut = MATERIALIZING
    print(name, "saved, not recomputed:", forced)
    wall = {k: [] for k in steps}
    cpu = {k: [] for k in steps}
    order = list(steps)
    for r in range(rounds):
        for k in order if r % 2 == 0 else order[::-1]:
            c, t = time.process_time(), time.perf_counter()
            steps[k].step()
            wall[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    medians = {k: f"{statistics.median(v) * 1e3:.2f} ms" for k, v in wall.items()}
    on_wall = statistics.median(a / b for a, b in zip(wall["off"], wall["on"]))
    on_cpu = statistics.median(a / b for a, b in zip(cpu["off"], cpu["on"]))
    print(name, medians, f"on over off: wall {on_wall:.3f}, cpu {on_cpu:.3f}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
