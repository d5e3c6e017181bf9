"""In-process A/B of the partition merge of independent pieces and openvino's NHWC saved values
(0fa803b) on one model's training step: eager, "off" (both disabled) and "on", alternating.

    MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=4294967296 MALLOC_TOP_PAD_=268435456 \\
    PYTHONPATH=. TORCHKILN_CACHE_DIR=$(mktemp -d) .venv/bin/python \\
        benchmarks/results/cpu-2026-11-29f/ab_merge_nhwc.py convnet 20
"""

import copy
import statistics
import sys
import time

import torch

import torchkiln.partition as partition
import torchkiln_openvino.compiler as compiler
from benchmarks.models import MODELS
from benchmarks.variants import parse_variant

torch.set_num_threads(1)
name, rounds = sys.argv[1], int(sys.argv[2])
built = MODELS[name].build("small")
orig_merge, orig_nhwc = partition._PartitionGraph.merge_independent, compiler.nhwc_inputs


def setmode(label):
    off = label == "off"
    partition._PartitionGraph.merge_independent = (lambda self: False) if off else orig_merge
    compiler.nhwc_inputs = (lambda ex: frozenset()) if off else orig_nhwc


steps = {}
for label in ("eager", "off", "on"):
    m = copy.deepcopy(built.module)
    f = m if label == "eager" else parse_variant("kiln:openvino").compile(m)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

    def step(f=f, opt=opt, label=label):
        setmode(label)
        out = f(*built.inputs)
        out = out if isinstance(out, torch.Tensor) else out[0]
        out.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    steps[label] = step
    for _ in range(3):
        step()
t = {k: [] for k in steps}
order = list(steps)
for r in range(rounds):
    for k in order if r % 2 else order[::-1]:
        s = time.perf_counter()
        steps[k]()
        t[k].append(time.perf_counter() - s)
med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
print(
    name,
    " ".join(f"{k} {v:.2f}ms" for k, v in med.items()),
    f"| eager/off {med['eager'] / med['off']:.3f} eager/on {med['eager'] / med['on']:.3f} off/on {statistics.median([a / b for a, b in zip(t['off'], t['on'])]):.3f}",
)
