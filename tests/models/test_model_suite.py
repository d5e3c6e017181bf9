"""The model suite: public architectures, every bundled backend, inference and training.

Each model of ``benchmarks.models.group("suite")`` (transformers: GPT-2, BERT,
RoBERTa, DistilBERT, Llama, Mistral, Qwen2, Gemma, T5, ViT, CLIP; timm: ViT,
EfficientNet, MobileNetV3, ConvNeXt, ResNet) is built from its config with
random weights (nothing is downloaded) and compiled with
``torchkiln.compile(model, backend=...)`` for ``eager``, ``aot_eager`` and
``inductor``. A deep-copied eager twin gets the same inputs:

* inference (``eval()``, ``no_grad``): the outputs, at the build's batch and
  sequence size and again at another one (``Built.resized_inputs``);
* training (``train()``, dropout off in every config): a step at each size,
  comparing the outputs, the gradient of every parameter and the buffers
  (BatchNorm's running statistics), with an SGD update between the two steps
  so that the second step also runs on updated weights.

Gradients are compared with a tolerance scaled to the model's largest gradient
(``model_testing.assert_close_to_largest`` says why).

Sizes: ``tiny`` by default (CI, with ``-n 2``). ``TORCHKILN_MODELS_SIZE=small``
or ``large`` builds the zoo's larger sizes (minutes per model on a CPU), e.g.
``TORCHKILN_MODELS_SIZE=small pytest tests/models -k llama``.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from model_testing import assert_close_to_largest, buffers, grads, loss_of

import torchkiln
from benchmarks.models import MODELS, SIZES, Built, group

SIZE = os.environ.get("TORCHKILN_MODELS_SIZE", "tiny")
if SIZE not in SIZES:
    raise ValueError(f"TORCHKILN_MODELS_SIZE={SIZE!r}: use one of {', '.join(SIZES)}")
BACKENDS = ("eager", "aot_eager", "inductor")


@pytest.fixture(autouse=True)
def fresh_captures():
    """Each test compiles from nothing: entries of the models before don't count to its limits."""
    torchkiln.reset()
    yield
    torchkiln.reset()


def build(name: str) -> Built:
    spec = MODELS[name]
    reason = spec.unavailable_reason()
    if reason is not None:
        pytest.skip(f"{name} {reason}")
    return spec.build(SIZE)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", group("suite"))
def test_inference(name: str, backend: str) -> None:
    built = build(name)
    model = built.module.eval()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend=backend)
    with torch.no_grad():
        for inputs in (built.inputs, built.resized_inputs):
            assert_close_to_largest({"output": compiled(*inputs)}, {"output": twin(*inputs)})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", group("suite"))
def test_training(name: str, backend: str) -> None:
    built = build(name)
    model = built.module.train()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend=backend)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (model, twin)]
    for inputs in (built.inputs, built.resized_inputs):
        output, expected = compiled(*inputs), twin(*inputs)
        loss_of(output).backward()
        loss_of(expected).backward()
        assert_close_to_largest({"output": output}, {"output": expected})
        assert_close_to_largest(grads(model), grads(twin))
        assert_close_to_largest(buffers(model), buffers(twin))
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
