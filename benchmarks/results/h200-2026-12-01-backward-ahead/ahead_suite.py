"""Every suite model's training step through the inductor with the backward compiled with
the forward (``backward_ahead``, forced on: it is on by default on a GPU only), on this
CPU: gradients against eager's, and how many backwards were compiled again because the
saved values' strides were not the ones the forward's compile announced.

    PYTHONPATH=. python benchmarks/results/h200-2026-12-01-backward-ahead/ahead_suite.py cpp
    TRITON_INTERPRET=1 PYTHONPATH=. python .../ahead_suite.py triton [model,model]
"""

import copy
import sys

import torch

sys.path.insert(0, "tests/models")
from model_testing import assert_close_to_largest, grads, loss_of

import torchkiln
from benchmarks.models import MODELS, group
from torchkiln import counters
from torchkiln.aot import aot_autograd
from torchkiln_inductor.backend import _Compiler, decompositions
from torchkiln_inductor.options import parse_options

target = sys.argv[1]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else group("suite")
compiler = _Compiler(parse_options({"cpu_backend": target}))


def backend(gm, example_inputs):
    return aot_autograd(
        fw_compiler=compiler,
        bw_compiler=compiler,
        inference_compiler=compiler,
        decompositions=decompositions(),
        backward_ahead=True,
    )(gm, example_inputs)


for name in names:
    torch.manual_seed(0)
    built = MODELS[name].build("tiny")
    model = built.module.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    twin = copy.deepcopy(model)
    torchkiln.reset()  # the suite's transformers share one forward: each starts uncaptured
    counters.clear()
    try:
        loss_of(torchkiln.compile(model, backend=backend)(*built.inputs)).backward()
        loss_of(twin(*built.inputs)).backward()
        assert_close_to_largest(grads(model), grads(twin))
        print(name, "ok, compiled again:", counters["aot"]["backward_ahead_missed"], flush=True)
    except Exception as e:
        print(name, "FAILED", type(e).__name__, str(e)[:300], flush=True)
