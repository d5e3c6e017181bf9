"""torchvision ResNet-18/50, random weights (``weights=None``).

Built only when ``torchvision`` is installed; nothing is downloaded. The timm
models are in ``timm_models``.
"""

from __future__ import annotations

from benchmarks.models import Built, ModelSpec, random_inputs

# size -> (batch, image side)
RESNET_SIZES = {"tiny": (2, 32), "small": (4, 64), "large": (128, 224)}


def _resnet(arch: str, size: str) -> Built:
    import torchvision

    batch, side = RESNET_SIZES[size]
    model = getattr(torchvision.models, arch)(weights=None)
    return Built(model, random_inputs((batch, 3, side, side)))


def build_resnet18(size: str) -> Built:
    return _resnet("resnet18", size)


def build_resnet50(size: str) -> Built:
    return _resnet("resnet50", size)


SPECS = [
    ModelSpec("tv_resnet18", "torchvision ResNet-18", build_resnet18, ("torchvision",)),
    ModelSpec("tv_resnet50", "torchvision ResNet-50", build_resnet50, ("torchvision",)),
]
