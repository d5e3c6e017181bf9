"""The openvino compiler of one aten graph, and the decompositions it expects.

``compile_aten_graph`` compiles each forward, backward and inference graph (or partition
of one) that the core gives the backend, through
:func:`torchkiln_openvino.choice.compile_partition`: the graph goes
through OpenVINO's PyTorch frontend (``TorchFXPythonDecoder``, keyed on each node's
``str(target)``; after :mod:`torchkiln_openvino.rewrites`), its inputs get the example
inputs' element types and static shapes (booleans in and out as bytes), and
``ov.Core().compile_model`` compiles it for the chosen device.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

import openvino as ov
import openvino.opset13 as opset
from openvino.frontend import FrontEndManager
from openvino.frontend.pytorch.fx_decoder import TorchFXPythonDecoder
from openvino.preprocess import PrePostProcessor
from torchkiln import logs
from torchkiln.exc import BackendUnavailable, InvalidOptionError, KilnError
from torchkiln_openvino import decompositions as own_decompositions
from torchkiln_openvino import freeze, ops, rewrites
from torchkiln_openvino.runtime import (
    NHWC,
    OpenVINOGraph,
    element_type,
    nhwc_inputs,
    slow_reorders,
)

aten = torch.ops.aten


def decompositions() -> dict:
    """torch's core-aten table, with the ops of
    :data:`torchkiln_openvino.decompositions.WRITTEN_OUT` kept whole
    (:func:`torchkiln_openvino.decompositions.table`).

    Not the AOT layer's default table: it brings some ops down to prims, which the
    frontend does not convert. Layer norm, the inference batch norm
    (``_native_batch_norm_legit_no_training``) and the fused CPU attention stay whole:
    OpenVINO runs each as one fused op (a decomposed batch norm costs ~4x). The
    training batch norm and the backward ops with fused torch kernels stay whole too,
    written out for OpenVINO (:mod:`torchkiln_openvino.rewrites`): torch, where it runs a
    graph, runs their fused kernels.
    """
    return dict(own_decompositions.table())


@functools.cache
def core() -> ov.Core:
    return ov.Core()


def compile_aten_graph(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    *,
    device: str = "CPU",
    precision: str = "f32",
    num_threads: int | None = None,
    cache_dir: str | None = None,
    freeze_weights: bool = False,
    disabled_ops: Sequence[str] = (),
) -> Callable:
    """Compile a functional aten graph to ``compiled(*flat_tensors) -> list``.

    With ``freeze_weights``, an inference graph's weights become constants on its first
    call (:mod:`torchkiln_openvino.freeze`); the conversion runs now all the same, so
    that a graph the frontend can't convert goes to the next backend of the chain. A
    graph whose outputs OpenVINO would reorder slowly is compiled again giving them NHWC
    (:func:`torchkiln_openvino.runtime.slow_reorders`); one an OpenVINO call would only
    slow down is returned as it is (:func:`runs_better_in_torch`).
    """
    off = ops.disabled(disabled_ops)
    named = sorted({str(n.target) for n in gm.graph.nodes if ops.is_disabled(n, off)})
    if named:
        raise KilnError(
            f"the graph has ops named in the openvino option disabled_ops: {', '.join(named)}; "
            "compile through torchkiln.compile(backend=['openvino', ...]) to run them elsewhere"
        )
    if runs_better_in_torch(gm):
        return gm
    if device not in core().available_devices and device != "AUTO":
        raise BackendUnavailable(
            f"OpenVINO has no device {device!r} here; available: "
            f"{', '.join(core().available_devices)} (or 'AUTO')"
        )
    weights = freeze.weight_positions(gm) if freeze_weights else ()
    nhwc = frozenset() if weights else nhwc_inputs(example_inputs)
    model = convert(gm, example_inputs, nhwc)
    taken = model_inputs(model, gm)
    feeds = None if taken == tuple(range(len(example_inputs))) else taken
    if weights and feeds is not None:
        raise KilnError("freeze_weights: OpenVINO's model takes only some of the graph's inputs")
    if logs.enabled("output_code"):
        logs.artifact("output_code", "openvino model %s:\n%s", model.get_friendly_name(), model)
    config = {
        "INFERENCE_PRECISION_HINT": precision,
        "INFERENCE_NUM_THREADS": num_threads or torch.get_num_threads(),
    }
    if device == "CPU" and not convolves(gm):
        config["SNIPPETS_MODE"] = "DISABLE"
    if cache_dir is not None:
        config["CACHE_DIR"] = private_dir(cache_dir)
    compile_model = functools.partial(core().compile_model, device_name=device, config=config)
    if weights:
        return freeze.FrozenGraph(model, gm, weights, compile_model)
    compiled = compile_model(model)
    slow = slow_reorders(compiled)
    if slow:
        compiled = compile_model(channels_last(model, slow))
    return OpenVINOGraph(
        compiled, gm, slow, feeds, frozenset(i for i, k in enumerate(taken) if k in nhwc)
    )


def runs_better_in_torch(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` costs less as it is than as an OpenVINO call (~30 us, and each tensor
    bound): a graph of views alone (aliases between two ops of the next backend), or of
    integer scalars alone (a batch norm's ``num_batches_tracked + 1``, a partition of
    its own), or one that returns nothing but its inputs (the model would compute none), or
    one that reads none of them (a backward's zeros: OpenVINO's frontend drops the unread
    inputs, and the model would take none)."""
    calls = [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
    ]
    values = [v for n in gm.graph.nodes for v in tree_leaves(n.meta.get("val"))]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    integer_scalars = all(t.numel() == 1 and not t.is_floating_point() for t in tensors)
    views = all(getattr(n.target, "is_view", False) for n in calls)
    reads_none = not any(p.users for p in gm.graph.find_nodes(op="placeholder"))
    return views or integer_scalars or reads_none or not rewrites.model_outputs(gm)


def convolves(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` has convolutions (or their backwards).

    A graph without them runs OpenVINO's eltwise kernels instead of its snippets
    subgraphs (``SNIPPETS_MODE``): each of the CPU zoo's training models without
    convolutions spent 1-7% less time in OpenVINO so (per-graph minimum infer times,
    summed, over 40 interleaved calls; chain 6.8%, nanogpt 4.8%), its transformers'
    inference 4-7% less. Around convolutions, eltwise kernels run planar, behind
    OpenVINO's slow reference reorders (convnet's inference took 1.5x as long).
    """
    return any(
        n.target in (aten.convolution.default, aten.convolution_backward.default)
        for n in gm.graph.nodes
    )


def check_options(options: Mapping[str, Any]) -> None:
    """What the option schema can't check: that ``cache_dir`` is a private folder."""
    if options.get("cache_dir") is not None:
        private_dir(options["cache_dir"])


def private_dir(path: str | os.PathLike) -> str:
    """``path`` (created 0700) if this user owns it and others can't write to it: OpenVINO
    loads compiled models from its cache folder without checking them."""
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise InvalidOptionError(
            f"option 'cache_dir' of backend 'openvino': {path} is not private (owned by uid "
            f"{st.st_uid}, mode {st.st_mode & 0o777:o}); name a folder of your own that only "
            "you can write to"
        )
    return path


def convert(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    nhwc: frozenset[int] = frozenset(),
) -> ov.Model:
    """The OpenVINO model of ``gm``, its inputs typed and shaped like ``example_inputs``,
    those at the positions ``nhwc`` (4-d) taken in NHWC order. OpenVINO's frontend drops
    some inputs the graph does not read (``x.data = y`` leaves x's old value unread):
    :func:`model_inputs` says which of the graph's inputs the model takes."""
    gm = rewrites.for_openvino(gm)
    # The decoder must outlive convert(): the frontend calls back into it.
    decoder = TorchFXPythonDecoder(gm)
    frontend = FrontEndManager().load_by_framework("pytorch")
    model = frontend.convert(frontend.load(decoder))
    taken = model_inputs(model, gm)
    for parameter, k in zip(model.get_parameters(), taken):
        parameter.set_element_type(element_type(example_inputs[k].dtype))
        parameter.set_partial_shape(ov.PartialShape(list(example_inputs[k].shape)))
    model.validate_nodes_and_infer_types()
    if nhwc & set(taken):
        steps = PrePostProcessor(model)
        for i, k in enumerate(taken):
            if k in nhwc:
                steps.input(i).tensor().set_layout(ov.Layout("NHWC"))
                steps.input(i).model().set_layout(ov.Layout("NCHW"))
        model = steps.build()
    booleans_as_bytes(model)
    return model


def model_inputs(model: ov.Model, gm: torch.fx.GraphModule) -> tuple[int, ...]:
    """The positions among ``gm``'s inputs of ``model``'s, found by name."""
    position = {p.name: k for k, p in enumerate(gm.graph.find_nodes(op="placeholder"))}
    names = [p.get_friendly_name() for p in model.get_parameters()]
    unknown = [name for name in names if name not in position]
    if unknown:
        raise KilnError(
            f"OpenVINO's frontend made inputs {unknown} that the graph does not have; report "
            f"this graph:\n{gm.print_readable(False)}"
        )
    return tuple(position[name] for name in names)


def channels_last(model: ov.Model, outputs: frozenset[int]) -> ov.Model:
    """A copy of ``model`` giving ``outputs`` (4-d) in NHWC order."""
    model = model.clone()
    for i in outputs:
        result = model.get_results()[i]
        nhwc = opset.transpose(result.input_value(0), opset.constant(list(NHWC), ov.Type.i64))
        result.input(0).replace_source_output(nhwc.output(0))
    model.validate_nodes_and_infer_types()
    return model


def booleans_as_bytes(model: ov.Model) -> None:
    """Makes, in place, ``model``'s boolean inputs and outputs bytes (torch's bools are bytes
    of 0 or 1), converted to and from booleans inside it.

    OpenVINO's CPU plugin converts boolean inputs and outputs with a reference
    implementation, ~1 ns an element: 100-150 us a tensor for convnet's relu masks, which
    its training graphs pass from the forward to the backward; inside the model, the
    conversion fuses with the ops next to it.
    """
    for parameter in model.get_parameters():
        if parameter.get_element_type() == ov.Type.boolean:
            users = parameter.output(0).get_target_inputs()
            parameter.set_element_type(ov.Type.u8)
            parameter.validate_and_infer_types()
            boolean = opset.convert(parameter, ov.Type.boolean)
            for user in users:
                user.replace_source_output(boolean.output(0))
    for result in model.get_results():
        if result.get_input_element_type(0) == ov.Type.boolean:
            result.input(0).replace_source_output(
                opset.convert(result.input_value(0), "u8").output(0)
            )
    model.validate_nodes_and_infer_types()
