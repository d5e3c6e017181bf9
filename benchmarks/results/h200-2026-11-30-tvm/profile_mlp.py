"""Where kiln:tvm's mlp time goes on the GPU: torch.profiler's kernel table."""

import torch
from torch.profiler import ProfilerActivity, profile

import torchkiln
from benchmarks.models import mlp

built = mlp.build("large")
model = built.module.to("cuda", torch.bfloat16).eval()
args = [a.to("cuda", torch.bfloat16) for a in built.inputs]
print([tuple(a.shape) for a in args], model)
with torch.no_grad():
    compiled = torchkiln.compile(model, backend="tvm")
    for fn, name in ((model, "eager"), (compiled, "tvm")):
        for _ in range(5):
            fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn(*args)
            torch.cuda.synchronize()
        print(name)
        print(
            prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=14, max_name_column_width=70
            )
        )
