"""End to end: ``torchkiln.compile(..., backend="aot_eager"/"aot_eager_decomp_partition")``.

Each test also checks, through the ``aot_graphs`` log, that the AOT layer
compiled a forward graph, so an eager fallback cannot pass for a match.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from aot_models import MLP, ConvBN, EmbeddingClassifier, TransformerBlock

import torchkiln
from torchkiln import logs

BACKENDS = ["aot_eager", "aot_eager_decomp_partition"]


@pytest.fixture
def forward_graphs(caplog):
    """A function returning how many forward graphs the AOT layer has logged so far."""
    logs.set_logs("aot_graphs")
    caplog.set_level(logging.INFO, logger="torchkiln")
    yield lambda: sum(r.getMessage().startswith("forward graph") for r in caplog.records)
    logs.set_logs("")


def two_cosines(x):
    return torch.cos(torch.cos(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_function_gradients_match_eager(backend, forward_graphs) -> None:
    x = torch.randn(5, 5, 5, requires_grad=True)
    compiled = torchkiln.compile(two_cosines, backend=backend)
    (actual,) = torch.autograd.grad(compiled(x).sum(), [x])
    (expected,) = torch.autograd.grad(two_cosines(x).sum(), [x])
    torch.testing.assert_close(actual, expected)
    assert forward_graphs() == 1


def _train_and_compare(model, make_inputs, backend, forward_graphs, steps: int = 3) -> None:
    eager = copy.deepcopy(model)
    compiled_model = copy.deepcopy(model)
    compiled = torchkiln.compile(compiled_model, backend=backend)
    opt_eager = torch.optim.Adam(eager.parameters(), lr=1e-2)
    opt_compiled = torch.optim.Adam(compiled_model.parameters(), lr=1e-2)
    for step in range(steps):
        inputs = make_inputs()
        torch.manual_seed(step)
        expected = eager(*inputs).float().pow(2).mean()
        torch.manual_seed(step)
        actual = compiled(*inputs).float().pow(2).mean()
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
        expected.backward()
        actual.backward()
        for (name, p_e), p_c in zip(eager.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(p_c.grad, p_e.grad, rtol=1e-4, atol=1e-5, msg=name)
        for (name, b_e), b_c in zip(eager.named_buffers(), compiled_model.buffers()):
            torch.testing.assert_close(b_c, b_e, rtol=1e-4, atol=1e-5, msg=name)
        for opt in (opt_eager, opt_compiled):
            opt.step()
            opt.zero_grad()
    assert forward_graphs() >= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_mlp_trains_as_eager(backend, forward_graphs) -> None:
    _train_and_compare(MLP(), lambda: (torch.randn(4, 16),), backend, forward_graphs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_cnn_with_batchnorm_trains_as_eager(backend, forward_graphs) -> None:
    _train_and_compare(ConvBN(), lambda: (torch.randn(2, 3, 6, 6),), backend, forward_graphs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_transformer_block_trains_as_eager(backend, forward_graphs) -> None:
    _train_and_compare(
        TransformerBlock(), lambda: (torch.randn(2, 5, 16),), backend, forward_graphs
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_embedding_cross_entropy_trains_as_eager(backend, forward_graphs) -> None:
    def inputs():
        return torch.randint(0, 50, (3, 7)), torch.randint(0, 50, (3, 7))

    _train_and_compare(EmbeddingClassifier(), inputs, backend, forward_graphs)
