"""torchvision ResNet-18/50 and a timm ViT, random weights (``weights=None``, ``pretrained=False``).

Built only when ``torchvision`` / ``timm`` are installed; nothing is downloaded.
"""

from __future__ import annotations

from benchmarks.models import Built, ModelSpec, random_inputs

# size -> (batch, image side)
RESNET_SIZES = {"tiny": (2, 32), "small": (4, 64), "large": (128, 224)}
# size -> (timm model name, depth, batch, image side); depth cut to keep GPU compiles short
VIT_SIZES = {
    "tiny": ("vit_tiny_patch16_224", 2, 2, 32),
    "small": ("vit_tiny_patch16_224", 4, 4, 64),
    "large": ("vit_base_patch16_224", 6, 64, 224),
}


def _resnet(arch: str, size: str) -> Built:
    import torchvision

    batch, side = RESNET_SIZES[size]
    model = getattr(torchvision.models, arch)(weights=None)
    return Built(model, random_inputs((batch, 3, side, side)))


def build_resnet18(size: str) -> Built:
    return _resnet("resnet18", size)


def build_resnet50(size: str) -> Built:
    return _resnet("resnet50", size)


def build_vit(size: str) -> Built:
    import timm

    name, depth, batch, side = VIT_SIZES[size]
    model = timm.create_model(name, pretrained=False, img_size=side, depth=depth)
    return Built(model, random_inputs((batch, 3, side, side)))


SPECS = [
    ModelSpec("tv_resnet18", "torchvision ResNet-18", build_resnet18, ("torchvision",)),
    ModelSpec("tv_resnet50", "torchvision ResNet-50", build_resnet50, ("torchvision",)),
    ModelSpec("timm_vit", "timm ViT (tiny on CPU, base width on GPU)", build_vit, ("timm",)),
]
