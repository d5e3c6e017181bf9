"""GPT-2 (small, bf16) under kiln:inductor with dynamic shapes against eager: logits and grads."""

import copy

import torch

import torchkiln
from benchmarks.dynamic import build_model


def logits(out):
    return out.logits if hasattr(out, "logits") else out


torch.manual_seed(0)
model = build_model("small", 512).cuda().to(torch.bfloat16)
reference = copy.deepcopy(model)
compiled = torchkiln.compile(model, backend="inductor")
for length in (7, 30, 64, 129, 300):
    ids = torch.randint(0, 1000, (2, length), device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(
            logits(compiled(ids)).float(), logits(reference(ids)).float(), atol=5e-2, rtol=5e-2
        )
    for m in (model, reference):
        m.zero_grad(set_to_none=True)
    logits(compiled(ids)).float().square().mean().backward()
    logits(reference(ids)).float().square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(
            p.grad.float(), q.grad.float(), atol=5e-2, rtol=5e-2, msg=f"T={length} {name}"
        )
    print("T", length, "ok", flush=True)
print("frames", torchkiln.counters["frames"]["total"])
