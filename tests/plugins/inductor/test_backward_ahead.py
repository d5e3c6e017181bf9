"""The inductor's staged compile (``start_compile_fx``): the strides it announces are the
ones its compiled graph returns, so the AOT layer's backward compiled with the forward
(``backward_ahead``, on by default on a GPU) is the one the first backward runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import aten_graph, needs_interpreter

import torchkiln
from torchkiln import counters
from torchkiln.aot import aot_autograd
from torchkiln_inductor.backend import _Compiler, decompositions
from torchkiln_inductor.compile_fx import start_compile_fx
from torchkiln_inductor.options import parse_options

TARGETS = ["cpp", pytest.param("triton", marks=needs_interpreter)]


class Attention(torch.nn.Module):
    """Heads split by views and permutes: saved values in permuted layouts."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out, self.norm = (
            torch.nn.Linear(16, 48),
            torch.nn.Linear(16, 16),
            torch.nn.LayerNorm(16),
        )

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 4, 4).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1)
        return self.out(F.gelu((att @ v).transpose(1, 2).reshape(b, t, 16))).square().mean()


def conv_net():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, stride=2),
        torch.nn.Flatten(),
    )


CASES = {
    "attention": (Attention, lambda: torch.randn(2, 5, 16)),
    "conv": (conv_net, lambda: torch.randn(2, 3, 8, 8)),
}


def _ahead_backend(cpu_backend: str):
    compiler = _Compiler(parse_options({"cpu_backend": cpu_backend}))

    def backend(gm, example_inputs):
        return aot_autograd(
            fw_compiler=compiler,
            bw_compiler=compiler,
            inference_compiler=compiler,
            decompositions=decompositions(),
            backward_ahead=True,
        )(gm, example_inputs)

    return backend


@pytest.mark.parametrize("cpu_backend", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_backward_compiled_with_the_forward_runs_and_matches_eager(case, cpu_backend):
    make_model, make_input = CASES[case]
    torch.manual_seed(0)
    model, x = make_model(), make_input()
    reference = make_model()
    reference.load_state_dict(model.state_dict())
    counters.clear()
    loss = torchkiln.compile(model, backend=_ahead_backend(cpu_backend))(x).sum()
    loss.backward()
    expected = reference(x).sum()
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-4)
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)
    assert counters["aot"]["backward_ahead_missed"] == 0


@pytest.mark.parametrize("cpu_backend", TARGETS)
def test_announced_strides_are_the_strides_of_the_outputs(cpu_backend):
    def fn(x, w):
        y = x @ w  # an extern call's output
        return y.t(), (y + 1).permute(1, 0), y.sum(0), x.shape[0] * 2

    x, w = torch.randn(6, 4), torch.randn(4, 5)
    started = start_compile_fx(
        aten_graph(fn, x, w), [x, w], parse_options({"cpu_backend": cpu_backend})
    )
    outputs = started.finish()(x, w)
    assert started.output_strides == [
        o.stride() if isinstance(o, torch.Tensor) else None for o in outputs
    ]
    for got, want in zip(outputs, fn(x, w), strict=True):
        torch.testing.assert_close(got, want)
