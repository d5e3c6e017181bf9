"""Where the backward's inputs that no graph made (the loss's gradient) land, call by call,
under kiln:cudagraphs; which inputs each recording copies. Argument: a model."""

import logging
import sys

import torch

import torchkiln
from benchmarks.cases import make_workload
from benchmarks.models import MODELS
from benchmarks.rows import on_device
from torchkiln_cudagraphs import capture

logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
logging.getLogger("torchkiln.cudagraphs").setLevel(logging.INFO)
seen = []
original = capture.CudaGraphRunner.call_boxed


def call_boxed(self, args):
    if self.kind == "backward":
        index = torch.cuda.current_device()
        seen.append(
            [
                (i, hex(a.data_ptr() % 2**36))
                for i, a in enumerate(args)
                if isinstance(a, torch.Tensor)
                and self.model.source_of(index, a) is None
                and not isinstance(a, torch.nn.Parameter)
            ]
        )
    return original(self, args)


capture.CudaGraphRunner.call_boxed = call_boxed
for warm_ups in (capture.WARM_UPS,):
    for name in sys.argv[1:]:
        seen.clear()
        built = on_device(MODELS[name].build("large"), torch.device("cuda"), torch.bfloat16)
        compiled = torchkiln.compile(built.module, backend="cudagraphs")
        work = make_workload(built.module, compiled, built.inputs, "training")
        for _ in range(8):
            work.step()
        torch.cuda.synchronize()
        print(f"WARM_UPS={warm_ups} {name}: backward inputs no graph made, per call: {seen}")
        del built, compiled, work
        torch.cuda.empty_cache()
