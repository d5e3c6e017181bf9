"""In-process A/B of a backend's training step with BoxedGraph's direct op calls on and off
(``core/aot/boxed.py``), against eager: deep copies of one model, steps alternating.

    PYTHONPATH=. python ab_boxed.py nanogpt,hf_bert aot_eager
"""

import copy
import statistics
import sys
import time

import torch

import torchkiln
from benchmarks.cases import make_workload
from benchmarks.models import MODELS
from torchkiln.aot import boxed

torch.set_num_threads(1)
direct = boxed._BoxedCodeGen._gen_python_code
plain = boxed.fx.graph.CodeGen._gen_python_code
for name in sys.argv[1].split(","):
    built = MODELS[name].build("small")
    steps = {}
    for label in ("eager", "plain", "direct"):
        module = copy.deepcopy(built.module)
        boxed._BoxedCodeGen._gen_python_code = plain if label == "plain" else direct
        forward = module if label == "eager" else torchkiln.compile(module, backend=sys.argv[2])
        workload = make_workload(module, forward, built.inputs, "training")
        for _ in range(3):
            workload.step()
        steps[label] = workload.step
    boxed._BoxedCodeGen._gen_python_code = direct
    times = {k: [] for k in steps}
    for r in range(40):
        for label, step in steps.items() if r % 2 else reversed(list(steps.items())):
            start = time.perf_counter()
            step()
            times[label].append(time.perf_counter() - start)
    base = statistics.median(times["eager"])
    rows = [
        f"{k} {statistics.median(v) * 1e3:.2f} ms ({base / statistics.median(v):.3f}x)"
        for k, v in times.items()
    ]
    print(name, sys.argv[2], "  ".join(rows), flush=True)
