"""Runs a compiled OpenVINO model on torch tensors' own memory.

Inputs are wrapped without copies (a copy only for non-contiguous tensors); each
call allocates fresh torch tensors for the outputs and binds them as the infer
request's output tensors, so OpenVINO writes its results straight into them and
no result aliases OpenVINO's buffers or an earlier call's. An infer request holds
state, so each thread gets its own, per compiled graph.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils._pytree import tree_leaves

import openvino as ov
from torchkiln.exc import KilnError

#: torch dtypes and the OpenVINO element types they share memory layouts with.
ELEMENT_TYPES = {
    torch.float32: ov.Type.f32,
    torch.float64: ov.Type.f64,
    torch.float16: ov.Type.f16,
    torch.bfloat16: ov.Type.bf16,
    torch.int64: ov.Type.i64,
    torch.int32: ov.Type.i32,
    torch.int16: ov.Type.i16,
    torch.int8: ov.Type.i8,
    torch.uint8: ov.Type.u8,
    torch.bool: ov.Type.boolean,
}


def element_type(dtype: torch.dtype) -> ov.Type:
    if dtype not in ELEMENT_TYPES:
        raise KilnError(f"the openvino backend does not run {dtype} tensors")
    return ELEMENT_TYPES[dtype]


def shared(tensor: torch.Tensor) -> ov.Tensor:
    """An OpenVINO tensor on ``tensor``'s memory (which must be contiguous)."""
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: share its bits as int16
        return ov.Tensor(tensor.view(torch.int16).numpy(), list(tensor.shape), ov.Type.bf16)
    return ov.Tensor(tensor.numpy(), shared_memory=True)


def passthrough_outputs(compiled: ov.CompiledModel) -> dict[int, int]:
    """Output index → input index, for the outputs that are an input as it is.

    OpenVINO leaves the output tensor bound to such an output unwritten: the runtime
    returns a copy of the input instead.
    """
    inputs = {port.get_node().get_friendly_name(): k for k, port in enumerate(compiled.inputs)}
    outputs = {port.get_node().get_friendly_name(): i for i, port in enumerate(compiled.outputs)}
    found = {}
    for result in compiled.get_runtime_model().get_results():
        source = result.input_value(0).get_node()
        if source.get_type_name() == "Parameter":
            found[outputs[result.get_friendly_name()]] = inputs[source.get_friendly_name()]
    return found


class OpenVINOGraph:
    """``graph(*flat_tensors) -> list`` running one compiled OpenVINO model."""

    def __init__(self, compiled: ov.CompiledModel, gm: torch.fx.GraphModule):
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        values = [n.meta["val"] for n in tree_leaves(output.args[0])]
        if len(values) != len(compiled.outputs):
            raise KilnError(
                f"OpenVINO compiled {len(compiled.outputs)} outputs of a graph with "
                f"{len(values)}; report this graph:\n{gm.print_readable(False)}"
            )
        for i, (port, value) in enumerate(zip(compiled.outputs, values)):
            if port.get_partial_shape() != ov.PartialShape(list(value.shape)):
                raise KilnError(
                    f"OpenVINO made output {i} of shape {port.get_partial_shape()}, torch's "
                    f"is {list(value.shape)}: the frontend converted an op wrongly"
                )
        self._bind(compiled, values)

    @classmethod
    def restored(cls, compiled: ov.CompiledModel, values: list[torch.Tensor]) -> OpenVINOGraph:
        """A graph loaded from the plan cache (``torchkiln_openvino.cache``): its outputs
        were checked against its FX graph when it was first compiled."""
        graph = cls.__new__(cls)
        graph._bind(compiled, values)
        return graph

    def _bind(self, compiled: ov.CompiledModel, values: list[torch.Tensor]) -> None:
        self.compiled = compiled
        #: the outputs' layouts, as meta tensors (what the plan cache stores)
        self.values = [
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") for v in values
        ]
        self.passthrough = passthrough_outputs(compiled)
        self.computed = [
            (i, tuple(v.shape), v.dtype) for i, v in enumerate(values) if i not in self.passthrough
        ]
        # Outputs eager lays out densely but otherwise than contiguously (a transpose):
        # copied into their strides.
        self.strided = {
            i: tuple(v.stride())
            for i, v in enumerate(values)
            if i not in self.passthrough
            and not v.is_contiguous()
            and is_non_overlapping_and_dense_or_false(v)
        }
        self._local = threading.local()

    def request(self) -> ov.InferRequest:
        """This thread's infer request."""
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
            self._local.bound = [None] * len(self.compiled.inputs)
        return request

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        request = self.request()
        bound = self._local.bound
        copies = []  # kept alive until the request has run
        for i, arg in enumerate(args):
            # OpenVINO reads a bound tensor's memory when it runs: the tensor bound on this
            # thread's last call, at the same address (a weight), needs no new binding
            if bound[i] is not None and bound[i][0]() is arg and bound[i][1] == arg.data_ptr():
                continue
            if arg.device.type != "cpu":
                raise KilnError(
                    f"the openvino backend runs on host memory; input {i} is on {arg.device}"
                )
            tensor = arg.detach()
            if tensor.is_contiguous():
                bound[i] = weakref.ref(arg), arg.data_ptr()
            else:
                tensor = tensor.contiguous()
                copies.append(tensor)
                bound[i] = None
            request.set_input_tensor(i, shared(tensor))
        outputs: list = [None] * len(self.compiled.outputs)
        for i, shape, dtype in self.computed:
            outputs[i] = torch.empty(shape, dtype=dtype)
            request.set_output_tensor(i, shared(outputs[i]))
        request.infer()
        for i, k in self.passthrough.items():
            outputs[i] = args[k].detach().clone()
        for i, stride in self.strided.items():
            fresh = torch.empty_strided(outputs[i].shape, stride, dtype=outputs[i].dtype)
            outputs[i] = fresh.copy_(outputs[i])
        return outputs
