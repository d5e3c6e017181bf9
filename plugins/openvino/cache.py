"""openvino graphs in the plan cache: a second process imports them, converting nothing.

A compiled graph is stored as ``CompiledModel.export_model()``'s bytes, the device it
runs on, the properties it was compiled with and its outputs' layouts; loading
imports it with ``Core.import_model`` and those properties again (without them the
precision hint is lost). Graphs OpenVINO can't export (``AUTO`` device) and graphs
with frozen weights (their constants are the weights of one call) are not stored. A
graph the compiler leaves to torch (``compiler.runs_better_in_torch``) is stored as
itself: a ``GraphModule`` pickles as its code. A graph measured against torch
(``choice.MeasuredChoice``) is stored as the variant it kept (torch's: its graph and the
strides of its inputs and outputs); one stored before its first call as both, measured
again by the process that loads it: the AOT layer stores a training plan when its
backward is compiled, before that backward's first call, and an inference plan before
its first call (a forward is measured by then).
The salt names this plugin's code and the openvino version.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import openvino as ov
from torchkiln.aot import ArtifactCodec
from torchkiln.plugin import source_fingerprint
from torchkiln_openvino.choice import MeasuredChoice, TorchGraph
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


@dataclass(frozen=True)
class TorchArtifact:
    """``choice.TorchGraph``: the aten graph torch runs, its ``layout()``."""

    graph: torch.fx.GraphModule
    layout: tuple[list, list]


@dataclass(frozen=True)
class UnmeasuredArtifact:
    """A ``choice.MeasuredChoice`` before its first call: both variants."""

    openvino: OpenVINOArtifact
    torch: TorchArtifact


Artifact = OpenVINOArtifact | TorchArtifact | UnmeasuredArtifact | torch.fx.GraphModule


def dump(compiled: object) -> Artifact | None:
    if isinstance(compiled, torch.fx.GraphModule):
        return compiled
    if isinstance(compiled, TorchGraph):
        return TorchArtifact(compiled.gm, compiled.layout())
    if isinstance(compiled, MeasuredChoice):
        if compiled.chosen is not None:
            return dump(compiled.chosen)
        openvino = dump(compiled.openvino)
        return None if openvino is None else UnmeasuredArtifact(openvino, dump(compiled.torch))
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


def load(artifact: Artifact) -> Callable:
    if isinstance(artifact, torch.fx.GraphModule):
        return artifact
    if isinstance(artifact, TorchArtifact):
        return TorchGraph(artifact.graph, artifact.layout)
    if isinstance(artifact, UnmeasuredArtifact):
        return MeasuredChoice(load(artifact.openvino), load(artifact.torch))
    compiled = core().import_model(artifact.model, artifact.device, artifact.properties)
    return OpenVINOGraph.restored(compiled, **artifact.layout)


def codec() -> ArtifactCodec:
    salt = "|".join(("openvino", source_fingerprint(str(Path(__file__).parent)), ov.__version__))
    return ArtifactCodec(salt, dump=dump, load=load)
