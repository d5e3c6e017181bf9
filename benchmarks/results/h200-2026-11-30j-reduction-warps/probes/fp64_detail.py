"""tv_resnet18 (size small, float32) against float64 eager, per parameter: eager twice, kiln with
and without light tuning, and how far each is from the others."""

import copy

import torch

import torchkiln
from benchmarks.cases import loss_of
from benchmarks.models import MODELS
from benchmarks.rows import on_device

dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def grads(module, inputs):
    out = module(*inputs)
    loss_of(out).backward()
    g = {n: p.grad.double().clone() for n, p in module.named_parameters()}
    return out.double(), g


torch.manual_seed(0)
built = on_device(MODELS["tv_resnet18"].build("small"), dev, torch.float32)
ref_out, ref_g = grads(copy.deepcopy(built.module).double(), [x.double() for x in built.inputs])
runs = {
    "eager": copy.deepcopy(built.module),
    "eager again": copy.deepcopy(built.module),
    "kiln": torchkiln.compile(copy.deepcopy(built.module)),
    "kiln light off": torchkiln.compile(
        copy.deepcopy(built.module), options={"autotune.light": False}
    ),
}
got = {}
for label, mod in runs.items():
    out, g = grads(mod, built.inputs)
    got[label] = g
    errs = sorted(((a - ref_g[n]).abs().max() / ref_g[n].abs().max(), n) for n, a in g.items())
    print(
        label,
        f"out err {((out - ref_out).abs().max() / ref_out.abs().max()).item():.2e}",
        "worst:",
        [
            (n, f"{e.item():.2e}", f"ref max {ref_g[n].abs().max().item():.2e}")
            for e, n in errs[-3:]
        ],
        flush=True,
    )
for a, b in (("eager", "eager again"), ("kiln", "eager"), ("kiln light off", "kiln")):
    worst = max(
        ((got[a][n] - got[b][n]).abs().max() / got[b][n].abs().max()).item() for n in got[a]
    )
    print(f"{a} vs {b}: worst {worst:.2e}")
