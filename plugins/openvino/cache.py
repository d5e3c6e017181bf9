"""openvino graphs in the plan cache: a second process imports them, converting nothing.

A compiled graph is stored as ``CompiledModel.export_model()``'s bytes, the device it
runs on, the properties it was compiled with and its outputs' layouts; loading
imports it with ``Core.import_model`` and those properties again (without them the
precision hint is lost). Graphs OpenVINO can't export (``AUTO`` device) and graphs
with frozen weights (their constants are the weights of one call) are not stored.
The salt names this plugin's code and the openvino version.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import openvino as ov
from torchkiln.aot import ArtifactCodec
from torchkiln.plugin import source_fingerprint
from torchkiln_openvino.compiler import core
from torchkiln_openvino.runtime import OpenVINOGraph

#: The compile_model properties a graph is imported with again.
PROPERTIES = ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS")


@dataclass(frozen=True)
class OpenVINOArtifact:
    model: bytes
    device: str
    properties: dict[str, Any]
    #: the outputs' layouts, as meta tensors
    values: list[torch.Tensor]


def _property(compiled: ov.CompiledModel, name: str) -> Any:
    value = compiled.get_property(name)
    return value.get_type_name() if isinstance(value, ov.Type) else value


def dump(compiled: object) -> OpenVINOArtifact | None:
    if not isinstance(compiled, OpenVINOGraph):
        return None
    model = compiled.compiled
    stream = io.BytesIO()
    try:
        model.export_model(stream)
    except RuntimeError:  # the AUTO device: "Not Implemented"
        return None
    return OpenVINOArtifact(
        stream.getvalue(),
        model.get_property("EXECUTION_DEVICES")[0],
        {name: _property(model, name) for name in PROPERTIES},
        compiled.values,
    )


def load(artifact: OpenVINOArtifact) -> OpenVINOGraph:
    compiled = core().import_model(artifact.model, artifact.device, artifact.properties)
    return OpenVINOGraph.restored(compiled, artifact.values)


def codec() -> ArtifactCodec:
    salt = "|".join(("openvino", source_fingerprint(str(Path(__file__).parent)), ov.__version__))
    return ArtifactCodec(salt, dump=dump, load=load)
