"""Runs a converted graph with onnxruntime, binding torch tensors' memory directly.

Inputs are bound by pointer (a copy only for non-contiguous tensors) and the
outputs are torch tensors allocated up front and bound as ONNX outputs, so no
data goes through numpy on either side, on CPU as on CUDA (with
onnxruntime-gpu; without it CUDA graphs run on the CPU, copied across).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import onnxruntime
import torch
from torch.utils._pytree import tree_leaves

from torchkiln.exc import BackendUnavailable, InvalidOptionError, KilnError, NotImplementedYet
from torchkiln_onnxrt.converter import ConvertedGraph
from torchkiln_onnxrt.dtypes import numpy_dtype

log = logging.getLogger("torchkiln.onnxrt")

OPTIMIZATION_LEVELS = {
    "disable": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def default_providers(device: torch.device) -> tuple[str, ...]:
    """CUDA first for graphs on a GPU when onnxruntime has it, CPU otherwise."""
    if device.type == "cuda":
        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            return ("CUDAExecutionProvider", "CPUExecutionProvider")
        log.warning(
            "onnxrt: this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu); "
            "running CUDA graphs on the CPU, copying inputs and outputs"
        )
        return ("CPUExecutionProvider",)
    if device.type == "cpu":
        return ("CPUExecutionProvider",)
    raise BackendUnavailable(f"the onnxrt backend runs on cpu and cuda, not on {device.type}")


def _is_cpu_scalar(t: torch.Tensor) -> bool:
    """A 0-dim CPU tensor, which torch lets mix with tensors of any device."""
    return t.device.type == "cpu" and t.dim() == 0


def graph_device(gm: torch.fx.GraphModule) -> torch.device:
    """The one device the graph's tensors live on (CPU for a graph without tensors).

    0-dim CPU tensors go with any device, as in eager; a graph that moves
    other tensors between devices is not handled.
    """
    devices = {
        value.device
        for node in gm.graph.nodes
        for value in tree_leaves(node.meta.get("val"))
        if isinstance(value, torch.Tensor) and not _is_cpu_scalar(value)
    }
    if len(devices) > 1:
        raise NotImplementedYet(
            "the onnxrt backend runs a graph on one device; this one has tensors on "
            f"{sorted(map(str, devices))}"
        )
    return devices.pop() if devices else torch.device("cpu")


class OnnxRuntimeGraph:
    """``graph(*flat_tensors) -> list`` running one ONNX model in an InferenceSession.

    ``device`` is where the graph's tensors live; the session runs there when
    its providers can (CUDA provider for CUDA tensors), else on the CPU, with
    inputs and outputs copied across.
    """

    def __init__(
        self,
        converted: ConvertedGraph,
        device: torch.device,
        providers: Sequence[str] | None = None,
        graph_optimization_level: str = "all",
        intra_op_num_threads: int | None = None,
    ):
        if graph_optimization_level not in OPTIMIZATION_LEVELS:
            raise InvalidOptionError(
                f"graph_optimization_level must be one of {', '.join(OPTIMIZATION_LEVELS)}, "
                f"got {graph_optimization_level!r}"
            )
        providers = list(providers or default_providers(device))
        on_gpu = device.type == "cuda" and "CUDAExecutionProvider" in providers
        self.device = device
        self.run_device = device if on_gpu else torch.device("cpu")
        self.input_names = converted.input_names
        self.output_slots = converted.output_slots
        self.output_metas = converted.output_metas
        self.output_names = [o.name for o in converted.model.graph.output]
        self.session = None
        if self.output_names:
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = OPTIMIZATION_LEVELS[graph_optimization_level]
            # As many threads as eager torch uses, so the two compare like for like.
            options.intra_op_num_threads = intra_op_num_threads or torch.get_num_threads()
            self.session = onnxruntime.InferenceSession(
                converted.model.SerializeToString(), sess_options=options, providers=providers
            )
        self._device_type = self.run_device.type
        self._device_id = self.run_device.index or 0
        self._placeholder = torch.empty(1, dtype=torch.float64, device=self.run_device)

    def __call__(self, *args: torch.Tensor) -> list:
        results = self._run(args) if self.session is not None else []
        return [results[s.index] if s.kind == "onnx" else s.value for s in self.output_slots]

    def _run(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        for arg in args:
            if arg.device != self.device and not _is_cpu_scalar(arg):
                raise KilnError(
                    f"the onnxrt graph was compiled for {self.device}, got an input on {arg.device}"
                )
        binding = self.session.io_binding()
        # Keep the (contiguous, run-device) copies alive until the run is over.
        inputs = [arg.detach().to(self.run_device).contiguous() for arg in args]
        for name, tensor in zip(self.input_names, inputs, strict=True):
            self._bind(binding.bind_input, name, tensor)
        outputs = [
            torch.empty(meta.shape, dtype=meta.dtype, device=self.run_device)
            for meta in self.output_metas
        ]
        for name, tensor in zip(self.output_names, outputs):
            self._bind(binding.bind_output, name, tensor)
        if self.run_device.type == "cuda":
            # onnxruntime runs on its own stream: the inputs must be ready.
            torch.cuda.current_stream(self.run_device).synchronize()
        self.session.run_with_iobinding(binding)
        return [o.to(meta.device) for o, meta in zip(outputs, self.output_metas)]

    def _bind(self, bind, name: str, tensor: torch.Tensor) -> None:
        # onnxruntime rejects null pointers, which empty tensors have: any valid
        # address will do, nothing is read or written there.
        pointer = tensor.data_ptr() if tensor.numel() else self._placeholder.data_ptr()
        bind(
            name,
            self._device_type,
            self._device_id,
            numpy_dtype(tensor.dtype),
            tuple(tensor.shape),
            pointer,
        )
