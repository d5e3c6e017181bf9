"""Write Python bytecode caches for what both compilers import (PYTHONPYCACHEPREFIX), as a
pip installation has them: this machine's packages have none, so every process compiled
torch's, Triton's and torchkiln's sources. Imports the stacks, then compiles a small model
with torch.compile and with torchkiln (inference and training) on the GPU."""

import time

start = time.perf_counter()
import timm  # noqa: E402,F401
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torchvision  # noqa: E402,F401
import transformers  # noqa: E402,F401

import torchkiln  # noqa: E402

model = torch.nn.Sequential(
    torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU(), torch.nn.Softmax(-1)
).cuda()
x = torch.randn(32, 64, device="cuda")
for compiled in (torch.compile(model), torchkiln.compile(model)):
    with torch.no_grad():
        compiled(x)
    compiled(x).sum().backward()
torch.cuda.synchronize()
print(f"bytecode caches written: {time.perf_counter() - start:.1f} s")
