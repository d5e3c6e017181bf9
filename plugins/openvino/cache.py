"""openvino graphs in the plan cache: a second process imports them, converting nothing.

A compiled graph is stored as ``CompiledModel.export_model()``'s bytes, the device it
runs on, the properties it was compiled with and its outputs' layouts; loading
imports it with ``Core.import_model`` and those properties again (without them the
precision hint is lost). Graphs OpenVINO can't export (``AUTO`` device) and graphs
with frozen weights (their constants are the weights of one call) are not stored. A
graph the compiler leaves to torch (``compiler.runs_better_in_torch``) is stored as
itself: a ``GraphModule`` pickles as its code.
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
    #: ``OpenVINOGraph.layout()``: its outputs' layouts, as meta tensors, and how the
    #: runtime makes the graph's outputs of the model's
    layout: dict[str, Any]


def _property(compiled: ov.CompiledModel, name: str) -> Any:
    value = compiled.get_property(name)
    return value.get_type_name() if isinstance(value, ov.Type) else value


def dump(compiled: object) -> OpenVINOArtifact | torch.fx.GraphModule | None:
    if isinstance(compiled, torch.fx.GraphModule):
        return compiled
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
        compiled.layout(),
    )


def load(artifact: OpenVINOArtifact | torch.fx.GraphModule) -> OpenVINOGraph | torch.fx.GraphModule:
    if isinstance(artifact, torch.fx.GraphModule):
        return artifact
    compiled = core().import_model(artifact.model, artifact.device, artifact.properties)
    return OpenVINOGraph.restored(compiled, **artifact.layout)


def codec() -> ArtifactCodec:
    salt = "|".join(("openvino", source_fingerprint(str(Path(__file__).parent)), ov.__version__))
    return ArtifactCodec(salt, dump=dump, load=load)
