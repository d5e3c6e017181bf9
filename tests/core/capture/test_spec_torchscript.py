"""Issue 15: ``torch.jit.script`` / ``torch.jit.trace`` callables inside compiled code.

A script function is inlined as the Python function it was made from (HF DeBERTa-v2
scripts ``build_relative_position``), in one graph. TorchScript modules and methods keep
no Python source: calling one breaks the graph and runs it natively, with a reason that
says so; compiling one runs it as it is, saying why once.
"""

import logging

import pytest
import torch
from torch import nn

import torchkiln
from kiln_testing import check_compiled


@torch.jit.script
def scaled(x: torch.Tensor, k: int) -> torch.Tensor:
    return x * k


@torch.jit.script
def log_bucket(x: torch.Tensor, buckets: int = 4) -> torch.Tensor:
    sign = torch.sign(x)
    return sign * torch.log1p(x.abs()) * buckets


def _traced_fn(x):
    return x.cos() + 2


traced = torch.jit.trace(_traced_fn, torch.randn(3))


class Doubler(nn.Module):
    def forward(self, x):
        return x.sin() * 2


scripted_module = torch.jit.script(Doubler())


def call_scaled(x):
    return scaled(x, 3) + 1


def call_with_default(x):
    return log_bucket(x) + log_bucket(x, buckets=2)


def call_traced(x):
    return traced(x) * 3


@pytest.mark.parametrize(
    "fn", [call_scaled, call_with_default, call_traced], ids=["script", "defaults", "trace"]
)
def test_script_functions_are_inlined_in_one_graph(fn, backend):
    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=1, fullgraph=True)


def test_script_function_inlined_under_aot_eager_gives_eager_gradients():
    compiled = torchkiln.compile(call_with_default, backend="aot_eager", fullgraph=True)
    for _ in range(2):
        x = torch.randn(5, requires_grad=True)
        x_eager = x.detach().clone().requires_grad_()
        out, expected = compiled(x), call_with_default(x_eager)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, x_eager.grad)


def test_compiling_a_script_function_compiles_its_python_function(backend):
    check_compiled(scaled, lambda: (torch.randn(4), 5), backend=backend, graphs=1, fullgraph=True)


def test_a_script_function_is_guarded_by_identity(backend):
    """Rebinding the global to another script function recompiles."""
    global scaled
    original = scaled
    compiled = torchkiln.compile(call_scaled, backend=backend, fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), call_scaled(x))
    try:
        scaled = log_bucket
        torch.testing.assert_close(compiled(x), call_scaled(x))
    finally:
        scaled = original
    assert backend.graph_count == 2


def call_module(x):
    return scripted_module(x) + 1


def test_a_script_module_breaks_the_graph_and_runs_natively(backend):
    check_compiled(call_module, lambda: (torch.randn(4),), backend=backend, graphs=1, breaks=1)


def test_the_break_at_a_script_module_says_why(backend):
    compiled = torchkiln.compile(call_module, backend=backend, fullgraph=True)
    with pytest.raises(torchkiln.exc.Unsupported, match="TorchScript runtime"):
        compiled(torch.randn(4))


class HoldsScripted(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.inner = torch.jit.script(Doubler())

    def forward(self, x):
        return self.inner(self.lin(x)).relu()


def test_a_script_submodule_breaks_the_graph_and_runs_natively(backend):
    model = HoldsScripted()
    check_compiled(model, lambda: (torch.randn(2, 4),), backend=backend, graphs=2, breaks=1)


def test_compiling_a_script_module_runs_it_as_it_is_and_says_why(backend, caplog):
    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        compiled = torchkiln.compile(scripted_module, backend=backend)
    assert "TorchScript module" in caplog.text
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), scripted_module(x))
    assert backend.graph_count == 0
