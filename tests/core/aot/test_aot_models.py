"""Training steps through the AOT backends match eager: loss, gradients, buffers."""

from __future__ import annotations

import copy

import pytest
import torch
from aot_models import MLP, ConvBN, EmbeddingClassifier, TransformerBlock
from torch import nn

from kiln_testing import flat_graph
from torchkiln.backends.aot import aot_eager, aot_eager_decomp_partition

BACKENDS = [aot_eager, aot_eager_decomp_partition]


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out if out.dim() == 0 else (out * out).mean()


def _train_and_compare(model: nn.Module, make_inputs, backend, steps: int = 3) -> None:
    eager = copy.deepcopy(model)
    compiled_model = copy.deepcopy(model)
    gm, state = flat_graph(compiled_model)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_compiled = torch.optim.SGD(compiled_model.parameters(), lr=0.1, momentum=0.9)
    compiled = None
    for step in range(steps):
        inputs = make_inputs()
        torch.manual_seed(step)
        expected = _loss(eager(*inputs))
        if compiled is None:
            compiled = backend(gm, [*state, *inputs])
        torch.manual_seed(step)
        actual = _loss(compiled(*state, *inputs))
        torch.testing.assert_close(actual, expected)
        expected.backward()
        actual.backward()
        for (name, p_e), p_c in zip(eager.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(p_c.grad, p_e.grad, msg=f"grad of {name}, step {step}")
        for (name, b_e), b_c in zip(eager.named_buffers(), compiled_model.buffers()):
            torch.testing.assert_close(b_c, b_e, msg=f"buffer {name}, step {step}")
        opt_eager.step()
        opt_compiled.step()
        opt_eager.zero_grad()
        opt_compiled.zero_grad()


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_mlp_training_matches_eager(backend) -> None:
    _train_and_compare(MLP(), lambda: (torch.randn(4, 16),), backend)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_cnn_batchnorm_training_updates_running_stats_as_eager(backend) -> None:
    _train_and_compare(ConvBN(), lambda: (torch.randn(2, 3, 6, 6),), backend)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_transformer_block_with_dropout_training_matches_eager(backend) -> None:
    _train_and_compare(TransformerBlock(), lambda: (torch.randn(2, 5, 16),), backend)


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_embedding_cross_entropy_training_matches_eager(backend) -> None:
    def inputs():
        return torch.randint(0, 50, (3, 7)), torch.randint(0, 50, (3, 7))

    _train_and_compare(EmbeddingClassifier(), inputs, backend)
