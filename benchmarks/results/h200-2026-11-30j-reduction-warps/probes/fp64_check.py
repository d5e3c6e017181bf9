"""Errors against a float64 eager reference: eager float32, torch.compile, kiln (light on/off)."""

import copy
import sys

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
    g = [p.grad.double().clone() for p in module.parameters()]
    for p in module.parameters():
        p.grad = None
    return out.double(), g


for name in sys.argv[1].split(","):
    for size in sys.argv[2].split(","):
        torch.manual_seed(0)
        built = on_device(MODELS[name].build(size), dev, torch.float32)
        ref_mod = copy.deepcopy(built.module).double()
        ref_out, ref_g = grads(ref_mod, [x.double() for x in built.inputs])
        runs = {
            "eager": copy.deepcopy(built.module),
            "torch.compile": torch.compile(copy.deepcopy(built.module)),
            "kiln": torchkiln.compile(copy.deepcopy(built.module)),
            "kiln light off": torchkiln.compile(
                copy.deepcopy(built.module), options={"autotune.light": False}
            ),
        }
        for label, mod in runs.items():
            out, g = grads(mod, built.inputs)
            oe = ((out - ref_out).abs().max() / ref_out.abs().max()).item()
            ge = max(
                ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
                for a, b in zip(g, ref_g)
            )
            print(f"{name} {size} {label:15s} out err {oe:.2e} worst grad err {ge:.2e}", flush=True)
