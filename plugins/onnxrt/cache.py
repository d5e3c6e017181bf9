"""onnxrt graphs in the plan cache: a second process opens sessions, converting nothing.

A compiled graph is stored as its ONNX model's bytes and what the session was opened
with (providers, optimization level, thread count, as the options gave them); loading
opens a new session on the bytes, importing neither onnx nor the converter. The salt
names this plugin's code and the onnx and onnxruntime versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import onnxruntime
import torch

from torchkiln.aot import ArtifactCodec
from torchkiln.index_checks import IndexCheck
from torchkiln.plugin import source_fingerprint
from torchkiln_onnxrt.converted import ConvertedGraph, OutputSlot
from torchkiln_onnxrt.runtime import OnnxRuntimeGraph


@dataclass(frozen=True)
class OutputMeta:
    """What the runtime reads of an output's fake value: its layout."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    #: the traced strides (None in entries stored before they were kept: contiguous)
    stride: tuple[int, ...] | None = None


@dataclass(frozen=True)
class OnnxArtifact:
    model: bytes
    input_names: list[str]
    output_names: list[str]
    output_metas: list[OutputMeta]
    output_slots: list[OutputSlot]
    input_args: list[int]
    device: torch.device
    options: dict[str, Any]
    index_checks: tuple[IndexCheck, ...] = ()


def dump(compiled: object) -> OnnxArtifact | None:
    if not isinstance(compiled, OnnxRuntimeGraph) or compiled.converted.symbolic:
        return None  # a model with dynamic dimensions is kept in memory only, as its plan
    converted = compiled.converted
    return OnnxArtifact(
        converted.model_bytes,
        list(converted.input_names),
        list(converted.output_names),
        [
            OutputMeta(tuple(m.shape), m.dtype, m.device, tuple(m.stride()))
            for m in converted.output_metas
        ],
        list(converted.output_slots),
        list(compiled.input_args),
        compiled.device,
        dict(compiled.options),
        converted.index_checks,
    )


def load(artifact: OnnxArtifact) -> OnnxRuntimeGraph:
    converted = ConvertedGraph(
        artifact.model,
        artifact.input_names,
        artifact.output_names,
        artifact.output_metas,
        artifact.output_slots,
        artifact.input_args,
        index_checks=artifact.index_checks,
    )
    return OnnxRuntimeGraph(converted, artifact.device, **artifact.options)


def codec() -> ArtifactCodec:
    salt = "|".join(
        (
            "onnxrt",
            source_fingerprint(str(Path(__file__).parent)),
            version("onnx"),
            onnxruntime.__version__,
        )
    )
    return ArtifactCodec(salt, dump=dump, load=load)
