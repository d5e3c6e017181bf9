"""Runs a converted graph with onnxruntime, binding torch tensors' memory directly.

Inputs are bound by pointer (a copy only for non-contiguous tensors) and the
outputs are torch tensors allocated up front and bound as ONNX outputs, so no
data goes through numpy or the host on either side: the same I/O-binding path
runs CPU tensors on the CPU provider and CUDA tensors on the CUDA provider
(``onnxruntime-gpu``), which is chosen from the tensors' device. A model with dynamic
dimensions sizes its outputs per call, from the arguments' sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnxruntime
import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils._pytree import tree_leaves

from torchkiln.exc import BackendUnavailable, InvalidOptionError, KilnError, NotImplementedYet
from torchkiln.index_checks import check_indices
from torchkiln_onnxrt.converted import ConvertedGraph
from torchkiln_onnxrt.dtypes import onnx_dtype

OPTIMIZATION_LEVELS = {
    "disable": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def session_providers(device: torch.device, providers: Sequence[str] | None) -> list[str]:
    """The providers a graph on ``device`` runs with: ``providers``, or CUDA then CPU on a GPU.

    A CUDA graph runs on the CUDA provider, on the tensors' own memory: without one
    it is an error, not a silent copy to the host.
    """
    if device.type not in ("cpu", "cuda"):
        raise BackendUnavailable(f"the onnxrt backend runs on cpu and cuda, not on {device.type}")
    if device.type == "cpu":
        return list(providers or ("CPUExecutionProvider",))
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        raise BackendUnavailable(
            "the onnxrt backend got CUDA tensors, but this onnxruntime has no "
            "CUDAExecutionProvider: pip install onnxruntime-gpu (in place of onnxruntime)"
        )
    if providers is None:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in providers:
        raise InvalidOptionError(
            f"the onnxrt option providers={list(providers)} has no CUDAExecutionProvider, "
            "which the graph's CUDA tensors need; add it, or leave providers unset"
        )
    return list(providers)


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

    ``device`` is where the graph's tensors live and the session runs
    (``providers`` from :func:`session_providers`).
    """

    def __init__(
        self,
        converted: ConvertedGraph,
        device: torch.device,
        providers: Sequence[str],
        graph_optimization_level: str = "all",
        intra_op_num_threads: int | None = None,
    ):
        if graph_optimization_level not in OPTIMIZATION_LEVELS:
            raise InvalidOptionError(
                f"graph_optimization_level must be one of {', '.join(OPTIMIZATION_LEVELS)}, "
                f"got {graph_optimization_level!r}"
            )
        self.device = device
        #: what builds this graph again in another process (``torchkiln_onnxrt.cache``)
        self.converted = converted
        self.options = {
            "providers": list(providers),
            "graph_optimization_level": graph_optimization_level,
            "intra_op_num_threads": intra_op_num_threads,
        }
        self.input_names = converted.input_names
        self.input_args = converted.input_args or list(range(len(self.input_names)))
        self.output_slots = converted.output_slots
        self.output_metas = converted.output_metas
        self.output_names = converted.output_names
        self.index_checks = converted.index_checks
        self.session = None
        if self.output_names:
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = OPTIMIZATION_LEVELS[graph_optimization_level]
            # As many threads as eager torch uses, so the two compare like for like.
            options.intra_op_num_threads = intra_op_num_threads or torch.get_num_threads()
            self.session = onnxruntime.InferenceSession(
                converted.model_bytes, sess_options=options, providers=list(providers)
            )
        self._device_type = device.type
        self._device_id = device.index or 0
        self._placeholder = torch.empty(1, dtype=torch.float64, device=device)
        self._ort_device = onnxruntime.OrtDevice.make(
            device.type, device.index or 0
        )._get_c_device()
        # Read once, not on every call: what each output is allocated as (a shape, or how a
        # call's arguments give it), the sizes the graph returns, and which outputs are CPU
        # scalars of a CUDA graph (returned on the CPU, as eager does).
        sources = converted.sources
        self._output_specs = [
            (sources.shape(m.shape) if sources else tuple(m.shape), m.dtype)
            for m in self.output_metas
        ]
        self._sizes = {
            j: sources.python(s.value) for j, s in enumerate(self.output_slots) if s.kind == "size"
        }
        self._cpu_scalar_outputs = [
            i for i, m in enumerate(self.output_metas) if m.device != device
        ]
        #: outputs eager lays out densely but not contiguously (a transpose, channels-last),
        #: by the order of their dimensions in memory (outermost first, as sizes vary with
        #: dynamic ones): onnxruntime writes them contiguously, the runtime copies them so
        self._restrided = {
            i: order for i, m in enumerate(self.output_metas) if (order := _permutation(m))
        }

    def __call__(self, *args: torch.Tensor) -> list:
        if self.index_checks:
            check_indices(args, self.index_checks)
        results = self._run(args) if self.session is not None else []
        return [
            results[s.index]
            if s.kind == "onnx"
            else self._sizes[j](args)
            if s.kind == "size"
            else s.value
            for j, s in enumerate(self.output_slots)
        ]

    def _run(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        # the C binding, not ``session.io_binding()``: its Python wrapper builds a device
        # object per tensor and checks CUDA-graph pinning per call, over half of the call
        # of a small graph
        binding = onnxruntime.capi._pybind_state.SessionIOBinding(self.session._sess)
        # Keep the contiguous copies (and CPU scalars moved to the device) alive until the run is over.
        inputs = [self._on_device(self._as_tensor(args[i])).contiguous() for i in self.input_args]
        for name, tensor in zip(self.input_names, inputs, strict=True):
            self._bind(binding.bind_input, name, tensor)
        outputs = [
            torch.empty(
                shape if type(shape) is tuple else shape(args), dtype=dtype, device=self.device
            )
            for shape, dtype in self._output_specs
        ]
        for name, tensor in zip(self.output_names, outputs):
            self._bind(binding.bind_output, name, tensor)
        if self._device_type == "cuda":
            # onnxruntime runs on its own stream: the inputs must be ready.
            torch.cuda.current_stream(self.device).synchronize()
        self.session._sess.run_with_iobinding(binding, None)
        for i in self._cpu_scalar_outputs:
            outputs[i] = outputs[i].cpu()
        for i, order in self._restrided.items():
            out = outputs[i]
            fresh = torch.empty_permuted(out.shape, order, dtype=out.dtype, device=out.device)
            outputs[i] = fresh.copy_(out)
        return outputs

    @staticmethod
    def _as_tensor(arg: torch.Tensor | int | float) -> torch.Tensor:
        """A size or float argument (an ONNX input of the model) as a 0-dim int64 or float64
        tensor."""
        if isinstance(arg, torch.Tensor):
            return arg
        return torch.tensor(arg, dtype=torch.float64 if isinstance(arg, float) else torch.int64)

    def _on_device(self, arg: torch.Tensor) -> torch.Tensor:
        """``arg`` on the graph's device: a 0-dim CPU tensor is moved there, as eager allows."""
        if arg.device == self.device:
            return arg
        if not _is_cpu_scalar(arg):
            raise KilnError(
                f"the onnxrt graph was compiled for {self.device}, got an input on {arg.device}"
            )
        return arg.to(self.device)

    def _bind(self, bind, name: str, tensor: torch.Tensor) -> None:
        # onnxruntime rejects null pointers, which empty tensors have: any valid
        # address will do, nothing is read or written there.
        pointer = tensor.data_ptr() if tensor.numel() else self._placeholder.data_ptr()
        bind(name, self._ort_device, onnx_dtype(tensor.dtype), tuple(tensor.shape), pointer)


def _permutation(meta: Any) -> tuple[int, ...] | None:
    """The order of an output's dimensions in memory, outermost first, where its traced
    layout (a fake tensor's, or the plan cache's ``OutputMeta``) is dense but not contiguous;
    None otherwise. Symbolic sizes and strides are compared at their traced values."""
    stride = meta.stride() if isinstance(meta, torch.Tensor) else meta.stride
    if stride is None:
        return None
    shape, stride = tuple(map(_traced, meta.shape)), tuple(map(_traced, stride))
    laid_out = torch.empty_strided(shape, stride, device="meta")
    if laid_out.is_contiguous() or not is_non_overlapping_and_dense_or_false(laid_out):
        return None
    return tuple(sorted(range(len(shape)), key=lambda d: (-stride[d], d)))


def _traced(size: Any) -> int:
    """A size at the value it was traced at (imported where one is symbolic: a process
    loading plans from the cache imports no sympy)."""
    if type(size) is int:
        return size
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    return optimization_hint(size)
