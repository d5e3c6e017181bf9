"""Weights folded into the OpenVINO model as constants (the ``freeze_weights`` option).

OpenVINO constant-folds what it knows at compile time (a batch norm into its
convolution, weights repacked once): weights kept as graph inputs cost 15-25%.
Only inference graphs fold them: the capture marks the placeholders of parameters and
module buffers ``meta["weight"]``, and the AOT layer passes the mark on to inference
graphs alone (a training step changes its weights every time), except on buffers the
graph writes (batch norm's running statistics in training mode).

A frozen graph is compiled on its first call, when the weights' values are known, and
each call checks that every weight is still the tensor it folded, at the same
``_version`` and address: an optimizer step, ``load_state_dict``, an in-place write
under ``no_grad`` or ``param.data = ...`` compiles it again with the new values. After
:data:`REFREEZE_LIMIT` such compiles the graph takes its weights as inputs for good.
Writes through ``param.data`` (``param.data.copy_(...)``) leave no trace torch can
see (no version bump, as for autograd's own checks): they are not seen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import torch

import openvino as ov
from torchkiln import logs
from torchkiln_openvino.runtime import OpenVINOGraph, shared

log = logging.getLogger("torchkiln")

#: Compiles with new weight values before a frozen graph takes its weights as inputs.
REFREEZE_LIMIT = 8


def weight_positions(gm: torch.fx.GraphModule) -> tuple[int, ...]:
    """The placeholders the AOT layer marks as weights (inference graphs only)."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    return tuple(k for k, node in enumerate(placeholders) if node.meta.get("weight"))


def fold(model: ov.Model, values: dict[int, torch.Tensor]) -> ov.Model:
    """A copy of ``model`` whose parameters at ``values``' positions are constants of them."""
    folded = model.clone()
    parameters = folded.get_parameters()
    for k, value in values.items():
        # the constant copies the value: OpenVINO never reads the weight's memory again
        constant = ov.op.Constant(shared(value.detach().contiguous()))
        parameters[k].output(0).replace(constant.output(0))
    for k in values:
        folded.remove_parameter(parameters[k])
    folded.validate_nodes_and_infer_types()
    return folded


class _Stamp:
    """What a frozen graph was compiled with: its weights, their versions and addresses."""

    def __init__(self, weights: list[torch.Tensor]):
        self.weights = weights
        self.versions = [w._version for w in weights]
        self.addresses = [w.data_ptr() for w in weights]

    def matches(self, weights: list[torch.Tensor]) -> bool:
        return (
            all([a is b for a, b in zip(weights, self.weights)])
            and [w._version for w in weights] == self.versions
            and [w.data_ptr() for w in weights] == self.addresses
        )


class FrozenGraph:
    """``graph(*flat_tensors) -> list``: an inference graph with its weights as constants."""

    def __init__(
        self,
        model: ov.Model,
        gm: torch.fx.GraphModule,
        weights: Sequence[int],
        compile_model: Callable[[ov.Model], ov.CompiledModel],
    ):
        self.model = model
        self.gm = gm
        self.weights = tuple(weights)
        self.compile_model = compile_model
        self.refreezes = 0
        # (stamp, graph): swapped whole, read without the lock
        self._state: tuple[_Stamp | None, OpenVINOGraph] | None = None
        self._lock = threading.Lock()

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        state = self._state
        if state is None or (
            state[0] is not None and not state[0].matches([args[k] for k in self.weights])
        ):
            state = self._compile(args)
        return state[1](*args)

    def _compile(self, args: Sequence[torch.Tensor]) -> tuple:
        with self._lock:
            weights = [args[k] for k in self.weights]
            state = self._state
            if state is not None and (state[0] is None or state[0].matches(weights)):
                return state  # another thread compiled it
            if state is not None:
                self.refreezes += 1
            if self.refreezes > REFREEZE_LIMIT:
                log.warning(
                    "openvino: the weights of a frozen graph changed %d times; it takes them "
                    "as inputs from now on (freeze_weights suits weights that stay put)",
                    self.refreezes,
                )
                graph = OpenVINOGraph(self.compile_model(self.model), self.gm)
                self._state = None, graph
                return self._state
            if state is not None:
                logs.artifact("recompiles", "openvino: a frozen weight changed; compiling again")
            feeds = tuple(k for k in range(len(args)) if k not in self.weights)
            folded = fold(self.model, dict(zip(self.weights, weights)))
            graph = OpenVINOGraph(self.compile_model(folded), self.gm, feeds=feeds)
            self._state = _Stamp(weights), graph
            return self._state
