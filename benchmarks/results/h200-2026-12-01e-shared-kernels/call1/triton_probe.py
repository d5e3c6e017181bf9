"""Whether a warm first step imports Triton: mlp (size large, bf16), inference and training,
cold in one process and warm in a second on the same caches."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.caches import cache_env

CHILD = """
import sys, torch, torchkiln
from benchmarks.cases import loss_of
from benchmarks.models import MODELS
from benchmarks.rows import on_device
from torchkiln import counters
built = on_device(MODELS["mlp"].build("large"), torch.device("cuda"), torch.bfloat16)
training = sys.argv[1] == "training"
built.module.train(training)
compiled = torchkiln.compile(built.module)
if training:
    loss_of(compiled(*built.inputs)).backward()
else:
    with torch.no_grad():
        compiled(*built.inputs)
torch.cuda.synchronize()
print(sys.argv[1], "triton imported:", "triton" in sys.modules, dict(counters["triton_binaries"]),
      dict(counters["autotune"]))
"""
for case in ("inference", "training"):
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, **cache_env(Path(tmp))}
        for run in ("cold", "warm"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, case],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                check=True,
            ).stdout
            print(run, out.strip().splitlines()[-1])
