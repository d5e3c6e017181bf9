"""``benchmarks.architectures`` builds its configs, passes a model that matches eager, and
fails one whose gradients do not."""

import pytest
import torch

import torchkiln

pytest.importorskip("transformers", reason="needs transformers (pip install transformers)")

from benchmarks import architectures


def test_every_config_builds():
    for name in architectures.ARCHITECTURES:
        model, make_inputs = architectures.build(name)
        assert isinstance(model, torch.nn.Module) and make_inputs(), name


def test_a_compiled_model_that_matches_eager_passes():
    row = architectures.check("wav2vec2", "aot_eager")
    assert (row["inference"], row["training"]) == ("ok", "ok"), row["note"]


def test_a_wrong_gradient_fails(monkeypatch):
    """A compiled model whose largest gradient is doubled after the step."""
    step = architectures._seeded_step

    def doubling_step(model, inputs):
        out = step(model, inputs)
        if isinstance(model, torchkiln.CompiledModule):
            with_grads = [p for p in model.parameters() if p.grad is not None]
            max(with_grads, key=lambda p: p.grad.abs().max()).grad.mul_(2)
        return out

    monkeypatch.setattr(architectures, "_seeded_step", doubling_step)
    row = architectures.check("albert", "eager")
    assert row["training"] == "FAIL" and "gradient" in row["note"]
