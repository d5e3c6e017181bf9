"""What converting a graph gives: the ONNX model's bytes and how to run and unpack it.

Kept apart from the converter, and free of ``onnx``, so that a process loading its
compiled graphs from the plan cache (``torchkiln_onnxrt.cache``) opens sessions without
importing the converter tables or onnx.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from torchkiln.index_checks import IndexCheck

if TYPE_CHECKING:
    import onnx

    from torchkiln_onnxrt.sizes import SizeSources


@dataclass(frozen=True)
class OutputSlot:
    """Where one output of the FX graph comes from when the model has run.

    ``kind`` is ``"onnx"`` (``index`` into the model's outputs), ``"const"``
    (``value`` is returned as it is: ``None`` or a Python number) or ``"size"``
    (``value`` is a SymInt, computed from each call's arguments).
    """

    kind: str
    index: int = 0
    value: Any = None


@dataclass
class ConvertedGraph:
    """The ONNX model of a graph (serialized), its inputs' and outputs' names, and how to
    assemble the FX graph's outputs.

    ``input_args``: the graph argument each ONNX input binds (None: the i-th binds the
    i-th); ``sources``: where a call gives the symbols of its sizes (None: no symbols);
    ``index_checks``: the graph's index inputs to check before a run (ONNX Gather takes
    negative indices where ``embedding`` and ``gather`` refuse them, and an index out of
    range fails as a RuntimeError where eager raises IndexError).
    """

    model_bytes: bytes
    input_names: list[str]
    output_names: list[str]
    output_metas: list[torch.Tensor]
    output_slots: list[OutputSlot]
    input_args: list[int] | None = None
    sources: SizeSources | None = None
    index_checks: tuple[IndexCheck, ...] = ()

    @property
    def symbolic(self) -> bool:
        return self.sources is not None and bool(self.sources.of)

    @functools.cached_property
    def model(self) -> onnx.ModelProto:
        """The model parsed, for printing and saving (imports onnx)."""
        import onnx

        return onnx.load_model_from_string(self.model_bytes)
