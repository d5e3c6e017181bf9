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

Training again under the inductor with ``dynamic=True``: one symbolic compile at the first
size serves the second (the default, automatic dynamic shapes, compiles the second size
anew, so a value taken at the first size's would go unnoticed). CI runs it on the models
of ``DYNAMIC_MODELS``; ``TORCHKILN_MODELS_DYNAMIC=all`` on every model of the suite.

Gradients are compared with a tolerance scaled to the model's largest gradient
(``model_testing.assert_close_to_largest`` says why).

Sizes: ``tiny`` by default (CI, with ``-n 2``). ``TORCHKILN_MODELS_SIZE=small``
or ``large`` builds the zoo's larger sizes (minutes per model on a CPU), e.g.
``TORCHKILN_MODELS_SIZE=small pytest tests/models -k llama``.

Device and precision: ``TORCHKILN_MODELS_DEVICE=cuda`` (default ``cpu``) and
``TORCHKILN_MODELS_DTYPE=bfloat16`` or ``float16`` (default ``float32``). In low
precision a float32 eager model is the reference, and the compiled model may be at
most a few times as far from it as eager in that precision is
(``model_testing.assert_no_worse_than_eager``).
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from model_testing import (
    assert_close_to_largest,
    assert_no_worse_than_eager,
    buffers,
    grads,
    loss_of,
)

import torchkiln
from benchmarks.models import MODELS, SIZES, Built, group

SIZE = os.environ.get("TORCHKILN_MODELS_SIZE", "tiny")
if SIZE not in SIZES:
    raise ValueError(f"TORCHKILN_MODELS_SIZE={SIZE!r}: use one of {', '.join(SIZES)}")
BACKENDS = ("eager", "aot_eager", "inductor")
DEVICE = torch.device(os.environ.get("TORCHKILN_MODELS_DEVICE", "cpu"))
DTYPE = getattr(torch, os.environ.get("TORCHKILN_MODELS_DTYPE", "float32"))
if not isinstance(DTYPE, torch.dtype) or not DTYPE.is_floating_point:
    raise ValueError(f"TORCHKILN_MODELS_DTYPE: {DTYPE!r} is not a floating-point dtype")


@pytest.fixture(autouse=True)
def fresh_captures():
    """Each test compiles from nothing: entries of the models before don't count to its limits."""
    torchkiln.reset()
    yield
    torchkiln.reset()


@pytest.fixture(autouse=True)
def exact_float32_convolutions():
    """cuDNN convolutions run in TF32 by default: two algorithms (eager's, and the one a
    compiled channels-last graph gets) then differ by ~1e-3, far above float32 rounding.
    The comparison is made in true float32 (on the H100 every timm model passes so)."""
    cudnn = torch.backends.cudnn
    # the context manager, not an assignment: importing torch's OpInfo database (the
    # conformance kit does) forbids setting the global flags directly
    with cudnn.flags(
        enabled=cudnn.enabled,
        benchmark=cudnn.benchmark,
        deterministic=cudnn.deterministic,
        allow_tf32=False,
    ):
        yield


def build(name: str) -> Built:
    spec = MODELS[name]
    reason = spec.unavailable_reason()
    if reason is not None:
        pytest.skip(f"{name} {reason}")
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        pytest.skip("TORCHKILN_MODELS_DEVICE=cuda needs a CUDA GPU")
    return spec.build(SIZE)


def on_device(inputs: tuple[torch.Tensor, ...], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """The inputs on the suite's device, floating-point ones in ``dtype``."""
    return tuple(t.to(DEVICE, dtype if t.is_floating_point() else t.dtype) for t in inputs)


class Twins:
    """The compiled model, its eager twin and (in low precision) a float32 eager reference,
    called alike and compared as the precision allows."""

    def __init__(self, module: torch.nn.Module, backend: str, dynamic: bool | None = None):
        module = module.to(DEVICE)
        self.reference = None if DTYPE is torch.float32 else copy.deepcopy(module)
        self.model = module.to(DTYPE)
        self.twin = copy.deepcopy(self.model)
        self.compiled = torchkiln.compile(self.model, backend=backend, dynamic=dynamic)

    def modules(self) -> list[torch.nn.Module]:
        return [m for m in (self.model, self.twin, self.reference) if m is not None]

    def run(self, inputs: tuple[torch.Tensor, ...]) -> dict[str, dict]:
        """Each model's output on ``inputs`` (the float32 reference's in float32)."""
        low, full = on_device(inputs, DTYPE), on_device(inputs, torch.float32)
        outputs = {"model": self.compiled(*low), "twin": self.twin(*low)}
        if self.reference is not None:
            outputs["reference"] = self.reference(*full)
        return outputs

    def compare(self, of: dict[str, dict]) -> None:
        if self.reference is None:
            assert_close_to_largest(of["model"], of["twin"])
        else:
            assert_no_worse_than_eager(of["model"], of["twin"], of["reference"])


#: the models trained with symbolic sizes in CI: attention, T5's relative positions, batch
#: norms and convolutions (every model: TORCHKILN_MODELS_DYNAMIC=all)
DYNAMIC_MODELS = ("hf_gpt2", "hf_t5", "timm_resnet", "timm_vit")


def training_runs() -> list:
    """(name, backend, dynamic) of every training test."""
    every = os.environ.get("TORCHKILN_MODELS_DYNAMIC") == "all"
    runs = [
        pytest.param(name, backend, None, id=f"{name}-{backend}")
        for name in group("suite")
        for backend in BACKENDS
    ]
    runs += [
        pytest.param(name, "inductor", True, id=f"{name}-inductor-dynamic")
        for name in group("suite")
        if every or name in DYNAMIC_MODELS
    ]
    return runs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", group("suite"))
def test_inference(name: str, backend: str) -> None:
    built = build(name)
    twins = Twins(built.module.eval(), backend)
    with torch.no_grad():
        for inputs in (built.inputs, built.resized_inputs):
            outputs = twins.run(inputs)
            twins.compare({k: {"output": v} for k, v in outputs.items()})


@pytest.mark.parametrize(("name", "backend", "dynamic"), training_runs())
def test_training(name: str, backend: str, dynamic: bool | None) -> None:
    built = build(name)
    twins = Twins(built.module.train(), backend, dynamic)
    modules = dict(zip(("model", "twin", "reference"), twins.modules()))
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01) for m in modules.values()]
    for inputs in (built.inputs, built.resized_inputs):
        outputs = twins.run(inputs)
        for output in outputs.values():
            loss_of(output).backward()
        twins.compare({k: {"output": v} for k, v in outputs.items()})
        twins.compare({k: grads(m) for k, m in modules.items()})
        twins.compare({k: buffers(m) for k, m in modules.items()})
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
