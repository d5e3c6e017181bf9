"""timm models with random weights (``pretrained=False``): ViT and convnets.

EfficientNet and MobileNetV3 (depthwise convolutions, squeeze-excitation,
BatchNorm, SiLU / hard-swish), ConvNeXt (7x7 depthwise, LayerNorm, layer
scale), ResNet (BatchNorm, residuals, max pooling) and a ViT. Built only when
``timm`` is installed; nothing is downloaded. Dropout and drop-path are off.

timm imports ``torchvision`` at import time (``FrozenBatchNorm2d`` and its data
transforms), none of which these models use. PyPI's torchvision wheel does not
load beside a CPU build of torch (``operator torchvision::nms does not
exist``), so where torchvision can't be found, :func:`import_timm` imports
timm against a stand-in for it, which is gone again once timm is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from functools import partial
from typing import Any

from torch import nn

from benchmarks.models import Built, ModelSpec, random_inputs

# size -> (batch, image side). Convnets get 64x64 even when tiny: at 32x32 their last stage is
# 1x1, and BatchNorm over 2 values per channel makes gradients ill-conditioned (float32 is then
# 1% off float64 in eager itself); ViT's tiny images are 32x32.
IMAGES = {"tiny": (2, 64), "small": (4, 64), "large": (64, 224)}


class _Absent(type):
    """A stand-in class: its attributes are stand-ins too, and making one raises ImportError."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        absent = _Absent(f"{cls.__name__}.{name}", (), {"__module__": cls.__module__})
        setattr(cls, name, absent)
        return absent

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise ImportError(f"{cls.__module__}.{cls.__name__} is torchvision's, not installed here")


class _AbsentModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        absent = _Absent(name, (), {"__module__": self.__name__})
        setattr(self, name, absent)
        return absent


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every ``torchvision.*`` module as an ``_AbsentModule``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _AbsentModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def import_timm() -> Any:
    """``import timm``; without torchvision, against the stand-in, removed again afterwards
    so that nothing else (``transformers`` looks for torchvision) takes it for the real one."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # pretrained=False: nothing may be downloaded
    if "timm" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        import timm

        return timm
    finder = _StandIn()
    sys.meta_path.insert(0, finder)
    try:
        import timm
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    return timm


def _classifier(model: nn.Module, size: str, side: int | None = None) -> Built:
    batch, default_side = IMAGES[size]
    side = side or default_side
    return Built(
        model,
        random_inputs((batch, 3, side, side)),
        random_inputs((batch + 1, 3, side, side)),
    )


def build_vit(size: str) -> Built:
    """ViT; on CPU sizes cut in depth and width, on GPU base width with 6 blocks."""
    timm = import_timm()
    side = 32 if size == "tiny" else IMAGES[size][1]
    shape = {
        "tiny": dict(patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10),
        "small": dict(depth=4),
        "large": dict(depth=6),
    }[size]
    name = "vit_base_patch16_224" if size == "large" else "vit_tiny_patch16_224"
    return _classifier(
        timm.create_model(name, pretrained=False, img_size=side, **shape), size, side
    )


def build_efficientnet(size: str) -> Built:
    """EfficientNet: inverted residuals with depthwise convolutions and squeeze-excitation."""
    timm = import_timm()
    if size == "large":
        return _classifier(timm.create_model("efficientnet_b0", pretrained=False), size)
    from timm.models._efficientnet_builder import decode_arch_def
    from timm.models.efficientnet import EfficientNet

    width = {"tiny": 1, "small": 2}[size]
    arch = [
        ["ds_r1_k3_s1_e1_c8_se0.25"],
        ["ir_r1_k3_s2_e4_c16_se0.25"],
        ["ir_r2_k5_s2_e4_c24_se0.25"],
        ["ir_r1_k3_s2_e4_c32_se0.25"],
    ]
    model = EfficientNet(
        block_args=decode_arch_def(arch, depth_multiplier=width),
        num_features=64 * width,
        stem_size=8 * width,
        num_classes=10,
        round_chs_fn=lambda channels: channels * width,
        act_layer=nn.SiLU,
    )
    return _classifier(model, size)


def build_mobilenetv3(size: str) -> Built:
    """MobileNetV3: hard-swish, squeeze-excitation gated by hard-sigmoid; tiny has 5 blocks."""
    timm = import_timm()
    if size != "tiny":
        name = "mobilenetv3_small_100" if size == "small" else "mobilenetv3_large_100"
        num_classes = 10 if size == "small" else 1000
        return _classifier(timm.create_model(name, pretrained=False, num_classes=num_classes), size)
    from timm.layers import get_act_layer
    from timm.models._efficientnet_blocks import SqueezeExcite
    from timm.models._efficientnet_builder import decode_arch_def, round_channels
    from timm.models.mobilenetv3 import MobileNetV3

    arch = [  # mobilenetv3_small's stages, one block each
        ["ds_r1_k3_s2_e1_c16_se0.25_nre"],
        ["ir_r1_k3_s2_e4.5_c24_nre"],
        ["ir_r1_k5_s2_e4_c40_se0.25"],
        ["ir_r1_k5_s2_e6_c48_se0.25"],
        ["cn_r1_k1_s1_c96"],
    ]
    model = MobileNetV3(
        block_args=decode_arch_def(arch),
        num_features=128,
        stem_size=16,
        num_classes=10,
        act_layer=get_act_layer("hard_swish"),
        se_layer=partial(SqueezeExcite, gate_layer="hard_sigmoid", force_act_layer=nn.ReLU,
                         rd_round_fn=round_channels),
    )  # fmt: skip
    return _classifier(model, size)


def build_convnext(size: str) -> Built:
    timm = import_timm()
    shape = {
        "tiny": dict(depths=(1, 1, 1, 1), dims=(16, 32, 64, 128), num_classes=10),
        "small": dict(num_classes=10),
        "large": {},
    }[size]
    name = "convnext_tiny" if size == "large" else "convnext_atto"
    return _classifier(timm.create_model(name, pretrained=False, **shape), size)


def build_resnet(size: str) -> Built:
    timm = import_timm()
    shape = {
        "tiny": dict(layers=(1, 1, 1, 1), channels=(16, 32, 64, 128), stem_width=16, num_classes=10),
        "small": dict(num_classes=10),
        "large": {},
    }[size]  # fmt: skip
    name = "resnet50" if size == "large" else "resnet18"
    return _classifier(timm.create_model(name, pretrained=False, **shape), size)


def _spec(name: str, what: str, build: Any, groups: tuple[str, ...] = ("suite",)) -> ModelSpec:
    return ModelSpec(name, f"timm {what}", build, ("timm",), groups)


SPECS = [
    _spec("timm_vit", "ViT (tiny on CPU, base width on GPU)", build_vit, ("zoo", "suite")),
    _spec("timm_efficientnet", "EfficientNet (depthwise, squeeze-excitation)", build_efficientnet),
    _spec("timm_mobilenetv3", "MobileNetV3 (hard-swish, squeeze-excitation)", build_mobilenetv3),
    _spec("timm_convnext", "ConvNeXt (7x7 depthwise, LayerNorm)", build_convnext),
    _spec("timm_resnet", "ResNet (BatchNorm, residuals)", build_resnet),
]
