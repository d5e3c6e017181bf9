"""Compiled training steps before and after tuning match eager's (GPU, float32).

    PYTHONPATH=. python tuned_check.py MODELS SIZE [OPTIONS_JSON]

OPTIONS_JSON: the inductor's options, e.g. '{"autotune.light": false}'. Where the tree has
``torchkiln_inductor.wait_for_tuning`` (the experiment's), it waits before the second step.
"""

import copy
import json
import sys

import torch

import torchkiln
import torchkiln_inductor
from benchmarks.cases import loss_of
from benchmarks.models import MODELS
from benchmarks.rows import on_device

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
bad = 0
for name in sys.argv[1].split(","):
    built = on_device(MODELS[name].build(sys.argv[2]), dev, torch.float32)
    eager = copy.deepcopy(built.module)
    options = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    compiled = torchkiln.compile(built.module, options=options)
    for step in range(3):
        wait = getattr(torchkiln_inductor, "wait_for_tuning", None)
        if step == 1 and wait is not None:
            print(name, "waited:", wait(timeout=300), flush=True)
        got = loss_of(compiled(*built.inputs))
        got.backward()
        want = loss_of(eager(*built.inputs))
        want.backward()
        worst = (got - want).abs().item() / max(want.abs().item(), 1e-6)
        for p, q in zip(built.module.parameters(), eager.parameters()):
            if p.grad is None or q.grad is None:
                continue
            err = ((p.grad - q.grad).abs().max() / q.grad.abs().max().clamp_min(1e-6)).item()
            worst = max(worst, err)
            p.grad = None
            q.grad = None
        ok = worst < 2e-3
        bad += not ok
        print(
            f"{name} step {step}: worst relative error {worst:.2e} {'ok' if ok else 'WRONG'}",
            dict(torchkiln.counters.get("autotune", {})),
            flush=True,
        )
print("wrong steps:", bad)
