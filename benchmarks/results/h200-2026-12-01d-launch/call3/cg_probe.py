"""Which inputs the cudagraphs backend copies into buffers of its own, chain training."""

import logging

import torch

import torchkiln
from benchmarks.cases import loss_of
from benchmarks.models import MODELS
from benchmarks.rows import on_device

logging.basicConfig(level=logging.WARNING)
logging.getLogger("torchkiln.cudagraphs").setLevel(logging.INFO)
built = on_device(MODELS["chain"].build("large"), torch.device("cuda"), torch.bfloat16)
built.module.train()
compiled = torchkiln.compile(built.module, backend="cudagraphs")
for _step in range(6):
    loss_of(compiled(*built.inputs)).backward()
torch.cuda.synchronize()
print("probe done")
