"""The model zoo: every benchmark model, built from code with random weights.

Each model module has ``build(size) -> Built``: the module and its example
inputs, on the CPU in float32, built after ``torch.manual_seed`` so that two
builds are identical. Nothing is downloaded. Models that need an optional
package (``transformers``, ``torchvision``, ``timm``) name it in
``ModelSpec.requires`` and are left out where it is not installed.

Sizes: ``tiny`` (smoke tests and the model suite in CI), ``small`` (the CPU),
``large`` (fills a GPU).

Groups: ``zoo`` (what ``benchmarks.run --models all`` runs) and ``suite`` (the
public architectures of ``tests/models/`` and ``benchmarks.models_report``;
``--models suite``). A model may be in both.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch

SIZES = ("tiny", "small", "large")
GROUPS = ("zoo", "suite")
SEED = 0


@dataclass(frozen=True)
class Built:
    """A model and the inputs one step feeds it.

    ``resized_inputs``: the same inputs at another batch and/or sequence size,
    for a second call that must recompile or reuse a dynamic graph (empty for
    models that don't have them).
    """

    module: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    resized_inputs: tuple[torch.Tensor, ...] = ()


@dataclass(frozen=True)
class ModelSpec:
    """A zoo entry: how to build the model, and which packages it needs."""

    name: str
    description: str
    build_fn: Callable[[str], Built]
    requires: tuple[str, ...] = ()
    groups: tuple[str, ...] = ("zoo",)

    def unavailable_reason(self) -> str | None:
        """Why this model can't be built here, or None when it can."""
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        return f"needs {', '.join(missing)} (not installed)" if missing else None

    def build(self, size: str) -> Built:
        """Build with fixed seeds: the same size always gives the same weights and inputs."""
        if size not in SIZES:
            raise ValueError(f"unknown size {size!r}; sizes: {', '.join(SIZES)}")
        torch.manual_seed(SEED)
        return self.build_fn(size)


def random_inputs(*shapes: tuple[int, ...], seed: int = SEED + 1) -> tuple[torch.Tensor, ...]:
    """Float inputs from a generator seeded apart from the weights."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=gen) for shape in shapes)


def random_tokens(vocab: int, shape: tuple[int, ...], seed: int = SEED + 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=gen)


def _zoo() -> dict[str, ModelSpec]:
    from benchmarks.models import chain, convnet, hf, mlp, nanogpt, timm_models, vision

    specs = [
        ModelSpec("mlp", "4-layer MLP, 1024 wide, GELU + LayerNorm", mlp.build),
        ModelSpec("nanogpt", "hand-written GPT: causal attention, explicit softmax", nanogpt.build),
        ModelSpec("chain", "memory-bound softmax(layer_norm(gelu(x * w + b)))", chain.build),
        ModelSpec("convnet", "hand-written ResNet-style CNN", convnet.build),
        *hf.SPECS,
        *vision.SPECS,
        *timm_models.SPECS,
    ]
    return {spec.name: spec for spec in specs}


MODELS: dict[str, ModelSpec] = _zoo()


def group(name: str) -> list[str]:
    """The names of the models in a group, in zoo order."""
    if name not in GROUPS:
        raise ValueError(f"unknown model group {name!r}; groups: {', '.join(GROUPS)}")
    return [model for model, spec in MODELS.items() if name in spec.groups]
