"""Benchmark-zoo models: a training step through the AOT layer matches eager (loss and gradients)."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from benchmarks.models import chain, convnet, mlp, nanogpt
from torchkiln_inductor.backend import compile_graph


def functional_graph(module: torch.nn.Module, inputs):
    """The module as an FX graph of (inputs..., parameters and buffers...) -> output."""
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    names = list(state)

    def forward(*args):
        n = len(inputs)
        return torch.func.functional_call(module, dict(zip(names, args[n:])), tuple(args[:n]))

    with torch.no_grad():
        gm = make_fx(forward)(*inputs, *state.values())
    return gm, list(state.values())


@pytest.mark.parametrize(
    "zoo", [mlp, chain, convnet, nanogpt], ids=lambda m: m.__name__.split(".")[-1]
)
def test_training_step_matches_eager(zoo):
    built = zoo.build("tiny")
    module = built.module
    inputs = list(built.inputs)
    gm, params = functional_graph(module, inputs)
    args = [*inputs, *params]
    out = compile_graph(gm, args)(*args)
    out = out[0] if isinstance(out, (list, tuple)) else out
    expected = module(*inputs)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    trainable = [p for p in params if p.requires_grad]
    grads = torch.autograd.grad(out.float().square().mean(), trainable)
    expected_grads = torch.autograd.grad(expected.float().square().mean(), trainable)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
