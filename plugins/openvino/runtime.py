"""Runs a compiled OpenVINO model on torch tensors' own memory.

Inputs are wrapped without copies (non-contiguous ones are copied into a buffer of
their own). Outputs are torch tensors bound as the infer request's output tensors, so
OpenVINO writes its results straight into them; no result aliases OpenVINO's buffers or
a result of an earlier call that is still referenced. An output the FX graph returns as
one of its inputs is that input. An infer request holds state, so each thread gets its
own, per compiled graph.

Binding a tensor costs ~15 us (a torch tensor, its numpy view, an ``ov.Tensor``, the
request's setter), and a training step binds every activation it saves: hf_bert's six
graphs bound 114 tensors a step, 2 ms of a 13 ms step. So an input at the address
bound on the thread's last call is not bound again (nor the buffer a non-contiguous
input is copied into), and an output buffer that nothing references any more (the
backward has freed the activations of the last step) is written again, still bound: in
a steady training loop nothing is bound at all.
"""

from __future__ import annotations

import sys
import threading

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils._pytree import tree_leaves

import openvino as ov
from torchkiln.exc import KilnError
from torchkiln.index_checks import IndexCheck, check_indices, index_checks
from torchkiln_openvino import rewrites

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

#: OpenVINO element types and the torch dtypes they share memory layouts with.
DTYPES = {ov_type: dtype for dtype, ov_type in ELEMENT_TYPES.items()}


def element_type(dtype: torch.dtype) -> ov.Type:
    if dtype not in ELEMENT_TYPES:
        raise KilnError(f"the openvino backend does not run {dtype} tensors")
    return ELEMENT_TYPES[dtype]


def shared(tensor: torch.Tensor) -> ov.Tensor:
    """An OpenVINO tensor on ``tensor``'s memory (which must be contiguous)."""
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: share its bits as int16
        return ov.Tensor(tensor.view(torch.int16).numpy(), list(tensor.shape), ov.Type.bf16)
    if tensor.dtype == torch.bool:  # models take and give booleans as bytes (compiler.convert)
        return ov.Tensor(tensor.view(torch.uint8).numpy(), shared_memory=True)
    return ov.Tensor(tensor.numpy(), shared_memory=True)


#: NCHW → NHWC, and back
NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def slow_reorders(compiled: ov.CompiledModel) -> frozenset[int]:
    """The outputs OpenVINO computes channels-last (a convolution's, say) and gives NCHW
    through its reference reorder.

    That reorder is slow where channels are few: 600 us for convnet's 8x16x32x32
    activations, which a training graph saves for the backward, 10 of them a step, where
    torch copies an NHWC tensor into NCHW in 100 us. Such outputs are better given NHWC
    (:func:`torchkiln_openvino.compiler.channels_last`), and copied by torch.
    """
    outputs = {port.get_node().get_friendly_name(): i for i, port in enumerate(compiled.outputs)}
    found = set()
    for result in compiled.get_runtime_model().get_results():
        reorder = result.input_value(0).get_node()
        info = reorder.get_rt_info()
        if (
            info["layerType"].astype(str) == "Reorder"
            and info["primitiveType"].astype(str) == "reorder_f32"
            and info["outputLayouts"].astype(str) == "abcd"
            and reorder.input_value(0).get_node().get_rt_info()["outputLayouts"].astype(str)
            == "acdb"
            and _orders_differ(reorder.get_output_shape(0))
        ):
            found.add(outputs[result.get_friendly_name()])
    return frozenset(found)


def nhwc_inputs(example_inputs) -> frozenset[int]:
    """The inputs laid out channels-last (a convolution's activation that a forward saved
    NHWC, as OpenVINO computed it): the model takes them in NHWC order, bound as they lie,
    where in NCHW each would be copied here and reordered back inside OpenVINO."""
    return frozenset(
        i
        for i, t in enumerate(example_inputs)
        if isinstance(t, torch.Tensor)
        and t.dim() == 4
        and t.is_floating_point()
        and _orders_differ(t.shape)
        and t.is_contiguous(memory_format=torch.channels_last)
    )


def _orders_differ(shape: ov.Shape) -> bool:
    """Whether an NCHW tensor of ``shape`` lies otherwise in memory NHWC (not 1x16x1x1)."""
    _, channels, height, width = shape
    return channels > 1 and height * width > 1


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


def _references(buffer: torch.Tensor) -> tuple[int, int]:
    """The tensors (``buffer`` itself included) and the Python references to its storage
    that hold ``buffer``'s memory (``_storage_Use_Count``: torch's own test of whether a
    storage is still used, as its CUDA graph trees make it)."""
    storage = buffer.untyped_storage()
    return torch._C._storage_Use_Count(storage._cdata), sys.getrefcount(storage)


#: ``_references`` of a tensor that nothing else holds
UNREFERENCED = _references(torch.empty(1))


def saved_outputs(gm: torch.fx.GraphModule) -> frozenset[int]:
    """The model outputs (:func:`torchkiln_openvino.rewrites.model_outputs`) of a training
    forward that it saves for the backward: the AOT layer counts the outputs before them
    (``meta["num_user_outputs"]``), and takes them in any strides (none in a graph the
    core partitioned: its outputs lack the count)."""
    users = gm.meta.get("num_user_outputs")
    if users is None:
        return frozenset()
    positions = rewrites.model_outputs(gm)
    return frozenset(i for i, position in enumerate(positions) if position >= users)


class OpenVINOGraph:
    """``graph(*flat_tensors) -> list`` running one compiled OpenVINO model."""

    def __init__(
        self,
        compiled: ov.CompiledModel,
        gm: torch.fx.GraphModule,
        channels_last: frozenset[int] = frozenset(),
        feeds: tuple[int, ...] | None = None,
        nhwc_inputs: frozenset[int] = frozenset(),
    ):
        """``channels_last``: the model's outputs it gives in NHWC order (see
        :func:`slow_reorders`); ``feeds``: the graph's inputs the model takes, by position
        (all of them if ``None``; a frozen graph's model takes no weights); ``nhwc_inputs``:
        the model's inputs it takes in NHWC order (:func:`nhwc_inputs`)."""
        leaves = tree_leaves(gm.graph.output_node().args[0])
        values = [leaves[p].meta["val"] for p in rewrites.model_outputs(gm)]
        if len(values) != len(compiled.outputs):
            raise KilnError(
                f"OpenVINO compiled {len(compiled.outputs)} outputs of a graph with "
                f"{len(values)}; report this graph:\n{gm.print_readable(False)}"
            )
        for i, (port, value) in enumerate(zip(compiled.outputs, values)):
            shape = value.permute(NHWC).shape if i in channels_last else value.shape
            if port.get_partial_shape() != ov.PartialShape(list(shape)):
                raise KilnError(
                    f"OpenVINO made output {i} of shape {port.get_partial_shape()}, torch's "
                    f"is {list(shape)}: the frontend converted an op wrongly"
                )
        repeats, returned = rewrites.repeated_outputs(gm), rewrites.returned_inputs(gm)
        self._bind(
            compiled,
            values,
            channels_last,
            repeats,
            returned,
            saved_outputs(gm),
            nhwc_inputs,
            index_checks(gm),
            feeds,
        )

    @classmethod
    def restored(cls, compiled: ov.CompiledModel, **layout) -> OpenVINOGraph:
        """A graph loaded from the plan cache (``torchkiln_openvino.cache``), with the
        layout of its outputs (:meth:`layout`): they were checked against its FX graph
        when it was first compiled."""
        graph = cls.__new__(cls)
        graph._bind(compiled, **layout)
        return graph

    def layout(self) -> dict:
        """What :meth:`restored` needs besides the compiled model (the plan cache stores it)."""
        return {
            "values": self.values,
            "channels_last": self.channels_last,
            "repeats": self.repeats,
            "returned": self.returned,
            "saved": self.saved,
            "nhwc_inputs": self.nhwc_inputs,
            "index_checks": self.index_checks,
            "feeds": self.feeds,
        }

    def _bind(
        self,
        compiled: ov.CompiledModel,
        values: list[torch.Tensor],
        channels_last: frozenset[int],
        repeats: dict[int, int],
        returned: dict[int, int],
        saved: frozenset[int],
        nhwc_inputs: frozenset[int] = frozenset(),
        index_checks: tuple[IndexCheck, ...] = (),
        feeds: tuple[int, ...] | None = None,
    ) -> None:
        """``values``, ``channels_last`` and ``saved`` are the model's outputs: their
        layouts, those given in NHWC order, those :func:`saved_outputs` (any strides will
        do); ``repeats`` and ``returned``, the FX graph's outputs the model does not give
        (:func:`torchkiln_openvino.rewrites.model_outputs`): by position, the earlier
        output each repeats, the input each is; ``nhwc_inputs``, the model's inputs it
        takes in NHWC order; ``index_checks``, the graph's index inputs to check before
        OpenVINO runs (its Gather gives zeros where eager raises); ``feeds``, the graph's
        inputs the model takes (``None``: all)."""
        self.compiled = compiled
        self.feeds = feeds
        self.values = [
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") for v in values
        ]
        self.channels_last = channels_last
        self.repeats = repeats
        self.returned = returned
        self.saved = saved
        self.nhwc_inputs = nhwc_inputs
        self.index_checks = index_checks
        #: (position, source, whether the source is an input), by position: filled in order,
        #: an earlier output is in place when a repeat of it is
        self.fills = sorted(
            [(p, k, True) for p, k in returned.items()]
            + [(p, first, False) for p, first in repeats.items() if p not in returned]
        )
        self.passthrough = passthrough_outputs(compiled)
        self.computed = [
            (i, tuple(v.permute(NHWC).shape if i in channels_last else v.shape), v.dtype)
            for i, v in enumerate(values)
            if i not in self.passthrough
        ]
        # Outputs eager lays out densely but otherwise than contiguously (a transpose), and
        # the channels-last ones: copied into eager's strides, from the buffer's order. A
        # saved value stays as computed (contiguous, or channels-last: an NCHW view of the
        # NHWC buffer): the backward graph, compiled with the strides it gets, takes it as
        # it is (in eager's strides, OpenVINO would reorder it back).
        self.copied = {
            i: (tuple(v.stride()), NCHW if i in channels_last else None)
            for i, v in enumerate(values)
            if i not in self.passthrough
            and i not in saved
            and (i in channels_last or not v.is_contiguous())
            and is_non_overlapping_and_dense_or_false(v)
        }
        #: saved channels-last outputs, handed out as NCHW views of their NHWC buffers
        self.viewed = [
            i for i in sorted(channels_last) if i not in self.passthrough and i not in self.copied
        ]
        #: per model input, the dtype it was compiled for (booleans are taken as bytes)
        self.input_dtypes = [DTYPES[port.get_element_type()] for port in compiled.inputs]
        #: the model's outputs, counted once: ``compiled.outputs`` makes a port object per
        #: output on every read (50-120 us a call in a training step of the zoo's models)
        self.num_outputs = len(compiled.outputs)
        self._local = threading.local()

    def request(self) -> ov.InferRequest:
        """This thread's infer request."""
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
            #: per input, the address bound
            self._local.bound = [None] * len(self.compiled.inputs)
            #: per input, the buffer a non-contiguous one is copied into
            self._local.staged = [None] * len(self.compiled.inputs)
            #: per computed output, the buffer bound
            self._local.buffers = [None] * len(self.computed)
        return request

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        if self.index_checks:
            check_indices(args, self.index_checks)
        request = self.request()
        bound, staged, buffers = self._local.bound, self._local.staged, self._local.buffers
        feeds = args if self.feeds is None else [args[k] for k in self.feeds]
        # ~0.5 us an input when nothing is bound (``is_cpu``, not ``device.type``: 1 us; no
        # ``detach`` but to bind: 1.2 us), hf_bert's training step has 100
        nhwc = self.nhwc_inputs
        for i, arg in enumerate(feeds):
            if not arg.is_cpu:
                raise KilnError(
                    f"the openvino backend runs on host memory; input {i} is on {arg.device}"
                )
            source = arg.permute(NHWC) if i in nhwc else arg
            dtype = self.input_dtypes[i]
            # copied into a buffer of its own, bound once: a non-contiguous input, and one
            # torch computed in another dtype than its meta says (a CPU layer norm of float16
            # with float32 weights gives float32 statistics, its meta float16)
            if not source.is_contiguous() or (source.dtype != dtype and arg.dtype != torch.bool):
                if staged[i] is None:
                    staged[i] = torch.empty(source.shape, dtype=dtype)
                source = staged[i].copy_(source)
            # OpenVINO reads the memory at the bound address when it runs, and shapes and
            # dtypes are static: an input at that address needs no new binding
            address = source.data_ptr()
            if bound[i] != address:
                request.set_input_tensor(i, shared(source.detach()))
                bound[i] = address
        outputs: list = [None] * self.num_outputs
        for j, (i, shape, dtype) in enumerate(self.computed):
            if buffers[j] is None or _references(buffers[j]) != UNREFERENCED:
                buffers[j] = torch.empty(shape, dtype=dtype)
                request.set_output_tensor(i, shared(buffers[j]))
            outputs[i] = buffers[j].detach()  # a tensor of its own: the buffer stays unseen
        # share_outputs: the results are already in ``outputs``; the default would copy
        # every output into a numpy array of its own, only to be thrown away
        request.infer(share_outputs=True)
        for i, k in self.passthrough.items():  # an input as it is: a copy in the traced strides
            traced = self.values[i]
            fresh = torch.empty_strided(traced.shape, traced.stride(), dtype=traced.dtype)
            outputs[i] = fresh.copy_(feeds[k])
        for i in self.viewed:
            outputs[i] = outputs[i].permute(NCHW)
        for i, (stride, order) in self.copied.items():
            result = outputs[i] if order is None else outputs[i].permute(order)
            fresh = torch.empty_strided(result.shape, stride, dtype=result.dtype)
            outputs[i] = fresh.copy_(result)
        for position, source, is_input in self.fills:
            # The graph's own input is that input, as eager has it (a training graph's
            # forward returns the weights it saves for the backward); a repeat, an alias.
            outputs.insert(position, args[source] if is_input else outputs[source].detach())
        return outputs
