"""Which aten nodes the openvino backend runs: its capabilities.

The ops are the ones OpenVINO's PyTorch frontend declares it converts from FX graphs
(``openvino.frontend.pytorch.torchdynamo.op_support``: a table, importing it loads
neither ``torch._dynamo`` nor ``openvino.torch``), and the ops the compiler writes out
for it (:data:`torchkiln_openvino.rewrites.WRITTEN_OUT`: the attention's backward, an
ungrouped convolution's, the training batch norm and the backward ops with fused torch
kernels). On top of the table:

* a multi-output op outside :data:`ALL_OUTPUTS` runs in OpenVINO only when the graph
  reads its output 0 alone: the frontend converts ``native_layer_norm``, the batch
  norms and the fused attention to their output 0 only, so a training graph that saves
  their other outputs for the backward runs them with the next backend, except a float32
  layer norm or attention and a training batch norm, whose other outputs the compiler
  computes (:mod:`torchkiln_openvino.rewrites`);
* softmaxes and sums of :data:`~torchkiln_openvino.decompositions.LARGE` elements or
  more run in torch (:data:`TORCH_FASTER_WHEN_LARGE`): OpenVINO's took 1.5-2x torch's
  time at one thread, more than the partition switch costs at that size (a large layer
  norm whose statistics a training graph reads, and the backwards of softmax, layer norm
  and GELU (:data:`~torchkiln_openvino.decompositions.FUSED_BACKWARDS`), run in torch as
  well);
* random ops run in torch, so that a seed gives eager's numbers (the frontend's
  ``native_dropout`` is wrong in training, too);
* OpenVINO reads host memory: nodes on another device are not taken;
* ``disabled_ops`` (a backend option) takes ops out.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_leaves

from torchkiln.aot import storage_views
from torchkiln.exc import InvalidOptionError
from torchkiln.plugin import Capabilities
from torchkiln_openvino import rewrites
from torchkiln_openvino.decompositions import FUSED_BACKWARDS, LARGE

#: The element types OpenVINO tensors share with torch and compute in (complex and float8
#: are not run; float64 neither: the CPU plugin computes it in float32, 5e-7 off eager).
DTYPES = frozenset(
    {
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    }
)


aten = torch.ops.aten

#: Multi-output ops whose every output the frontend converts as torch computes it (the
#: splits: a transformer's q, k, v). It converts only output 0 of the others (layer and
#: batch norms, fused attention, ...), and its max-pooling, max/min, topk and sort break
#: ties between equal values otherwise than torch: their indices would send gradients
#: elsewhere than eager does.
ALL_OUTPUTS = frozenset({aten.var_mean.correction, aten.split_with_sizes.default, aten.unbind.int})


#: Ops whose OpenVINO kernels take longer than torch's on tensors of
#: :data:`~torchkiln_openvino.decompositions.LARGE` elements or more, at one thread: by more
#: than a partition switch costs at that size
TORCH_FASTER_WHEN_LARGE = {
    aten._softmax.default: "a softmax",  # 4096x1024: 7.2 against 4.9 ms; 1024x1024: 1.7, 1.0
    aten.sum.dim_IntList: "a sum",  # 4096x1024 over dim 0: 2.6 against 1.4 ms
}


@functools.cache
def frontend_ops() -> frozenset:
    """The aten overloads (and packets) the OpenVINO PyTorch frontend converts from FX, and
    the backward ops :mod:`torchkiln_openvino.rewrites` writes out for it."""
    from openvino.frontend.pytorch.torchdynamo.op_support import OperatorSupport

    table = (resolve(name) for name in OperatorSupport(None)._support_dict)
    return frozenset(op for op in table if op is not None) | rewrites.WRITTEN_OUT


def resolve(name: str) -> Any:
    """``"torch.ops.aten.add.Tensor"`` or ``"aten.add.Tensor"`` → the op, ``None`` if unknown."""
    parts = name.removeprefix("torch.ops.").split(".")
    if parts[0] != "aten" or len(parts) not in (2, 3):
        return None
    packet = getattr(torch.ops.aten, parts[1], None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return None
    return packet if len(parts) == 2 else getattr(packet, parts[2], None)


def disabled(names: Iterable[str]) -> frozenset:
    """The ops ``disabled_ops`` names, each checked."""
    ops = set()
    for name in names:
        op = resolve(name) if isinstance(name, str) else None
        if op is None:
            raise InvalidOptionError(
                f"option 'disabled_ops' of backend 'openvino': {name!r} is not an aten op; "
                "name overloads such as 'aten.gelu.default', or packets such as 'aten.gelu'"
            )
        ops.add(op)
    return frozenset(ops)


def is_disabled(node: fx.Node, off: frozenset) -> bool:
    """Whether ``node``'s overload or its packet is among the ops ``off``."""
    return node.target in off or getattr(node.target, "overloadpacket", None) in off


def supports(node: fx.Node, torch_when_large: bool = True) -> bool | str:
    """Whether OpenVINO runs ``node`` (its op being in the table), else why not;
    ``torch_when_large``: whether :data:`TORCH_FASTER_WHEN_LARGE` applies (float32 graphs:
    OpenVINO's bfloat16 and float16 kernels move half the bytes)."""
    values = [v for v in tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)]
    devices = {v.device.type for v in values} - {"cpu"}
    if devices:
        return f"tensors on {', '.join(sorted(devices))}: OpenVINO runs on host memory"
    dtypes = {v.dtype for v in values} - DTYPES
    if dtypes:
        return f"{', '.join(sorted(map(str, dtypes)))} tensors"
    if node.target in FUSED_BACKWARDS and _large(node.args[0]):
        return "a backward of a large tensor: torch's fused kernel is faster"
    if node.target is aten._native_batch_norm_legit_functional.default and _mixed_precision(node):
        return (
            "a float16 or bfloat16 batch norm with float32 parameters: torch's CPU kernel gives "
            "its statistics in float32 (its trace says the input's dtype, as OpenVINO would "
            "give them), and its backward kernel takes no others"
        )
    if node.target in rewrites.WRITTEN_OUT and not rewrites.expands(node):
        return (
            "not converted by the frontend, written out only for plain convolutions "
            "and attention without dropout"
        )
    if torch_when_large and node.target in TORCH_FASTER_WHEN_LARGE and _large(node.args[0]):
        return f"{TORCH_FASTER_WHEN_LARGE[node.target]} of a large tensor: torch's is faster"
    if _draws_random_numbers(node):
        return "a random op: torch draws its numbers, so that a seed gives eager's"
    wrong = converted_wrongly(node) or not_converted(node)
    if wrong:
        return wrong
    if isinstance(node.meta.get("val"), (tuple, list)) and node.target not in ALL_OUTPUTS:
        used = {user.args[1] for user in node.users if user.target is operator.getitem}
        if len(used) != len(node.users) or (used - {0} and not rewrites.expands(node)):
            if node.target is aten.native_layer_norm.default and _large(node.args[0]):
                return (
                    "a large layer norm whose statistics the graph reads: torch computes "
                    "them with the norm, OpenVINO in three more passes"
                )
            return "the graph reads outputs besides output 0, which OpenVINO does not convert"
    return True


def converted_wrongly(node: fx.Node) -> str | None:
    """Why OpenVINO (2026.4) would compute ``node`` wrongly, found by the conformance kit's
    op sweep; None where it does not."""
    if node.target in (aten.var.correction, aten.var_mean.correction):
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if dims is None:
            return "a variance over every dimension: OpenVINO's ignores the correction"
    if node.target in STORAGE_READERS and not _dense_from_start(node.args[0]):
        return (
            "as_strided of a strided value: OpenVINO's reads the value's elements in order, "
            "not its storage"
        )
    if node.target is aten.repeat.default and not node.args[1]:
        return "a repeat with no repeats: OpenVINO's returns uninitialized memory"
    if node.target is aten.abs.default and not _reads_inputs(node.args[0]):
        return (
            "abs of a value computed from constants alone: OpenVINO's optimizer drops it "
            "(abs(arange(-2, 1)) came back as arange(-2, 1): reflection padding's indices)"
        )
    return None


#: ops that address their input's storage by strides and an offset
STORAGE_READERS = storage_views.STORAGE_READERS | {aten.as_strided_scatter.default}


def _dense_from_start(arg) -> bool:
    """Whether ``arg`` was traced contiguous from its storage's start: the dense tensor
    OpenVINO holds for it then has torch's layout (inputs are traced from their storage's
    start, see ``torchkiln.aot.storage_views``)."""
    val = arg.meta.get("val") if isinstance(arg, fx.Node) else None
    return isinstance(val, torch.Tensor) and val.is_contiguous() and val.storage_offset() == 0


MATMULS = (aten.mm.default, aten.bmm.default, aten.addmm.default)


def not_converted(node: fx.Node) -> str | None:
    """Why OpenVINO (2026.4) would fail to convert or compile ``node``, failing the compile of
    its whole graph (found by the conformance kit's gradient sweep); None where it does not."""
    if _over_a_dim_of_a_scalar(node):
        return "an op over a dimension of a 0-d tensor: OpenVINO's frontend reads it out of range"
    if node.target in MATMULS and any(a.meta["val"].numel() == 0 for a in node.all_input_nodes):
        return (
            "a matmul of an empty tensor: OpenVINO's CPU plugin fails to compile it beside a "
            "transpose ('object is not initialized')"
        )
    if node.target is aten.gather.default:
        source, index = node.args[0].meta["val"], node.args[2].meta["val"]
        dim = node.args[1] % max(source.ndim, 1)
        if any(i != s for d, (i, s) in enumerate(zip(index.shape, source.shape)) if d != dim):
            return (
                "a gather whose index is smaller than its input outside dim: OpenVINO's "
                "GatherElements takes them equal"
            )
    return None


def _over_a_dim_of_a_scalar(node: fx.Node) -> bool:
    """Whether ``node`` is given a dimension (``dim``, ``dims``) of a 0-d tensor, its first
    argument (``sum(x, [0], keepdim=True)``, ``index_select``, ``flip``, ``max.dim``...); not
    ``unsqueeze``, whose dim is one of its result's."""
    if node.target is aten.unsqueeze.default:
        return False
    schema = getattr(node.target, "_schema", None)
    first = node.args[0] if node.args else None
    if schema is None or not isinstance(first, fx.Node):
        return False
    value = first.meta.get("val")
    if not isinstance(value, torch.Tensor) or value.ndim:
        return False
    for k, arg in enumerate(schema.arguments):
        if arg.name in ("dim", "dims"):
            given = node.kwargs.get(arg.name, node.args[k] if k < len(node.args) else None)
            return given not in (None, [], ())
    return False


def _reads_inputs(node: fx.Node) -> bool:
    """Whether ``node`` depends on a graph input (or a weight), not on constants alone."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n.op in ("placeholder", "get_attr"):
            return True
        for arg in n.all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                todo.append(arg)
    return False


def _mixed_precision(node: fx.Node) -> bool:
    """Whether a norm's input is float16 or bfloat16 and a parameter or statistic float32:
    torch's CPU norms then compute and save their statistics in float32."""
    input, *others = (a.meta["val"] for a in node.args[:5] if isinstance(a, fx.Node))
    low = input.dtype in (torch.float16, torch.bfloat16)
    return low and any(v.dtype == torch.float32 for v in others)


def _large(node: fx.Node) -> bool:
    return node.meta["val"].numel() >= LARGE


def _draws_random_numbers(node: fx.Node) -> bool:
    """A random op; fused attention only with a dropout probability."""
    if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
        return False
    for k, arg in enumerate(node.target._schema.arguments):
        if arg.name == "dropout_p":
            p = node.kwargs.get("dropout_p", node.args[k] if k < len(node.args) else 0.0)
            return p != 0.0
    return True


def capabilities(compile_partition, decompositions, check_options, codec=None) -> Capabilities:
    """The backend's capabilities; ``configure`` checks the options (``check_options``:
    before any partition is compiled, whose errors would send it to the next backend) and
    applies ``disabled_ops`` and ``precision``. ``codec`` stores compiled graphs in the
    plan cache."""

    def configure(options: Mapping[str, Any]) -> Capabilities:
        check_options(options)
        off = disabled(options.get("disabled_ops", ()))
        torch_when_large = options.get("precision", "f32") == "f32"
        if not off and torch_when_large:
            return base

        def supports_unless_disabled(node: fx.Node) -> bool | str:
            if is_disabled(node, off):
                return "named in its option disabled_ops"
            return supports(node, torch_when_large)

        return Capabilities(
            compile_partition,
            frontend_ops(),
            supports_unless_disabled,
            decompositions,
            codec=codec,
            saves_for_others=True,
        )

    base = Capabilities(
        compile_partition,
        frontend_ops(),
        supports,
        decompositions,
        configure,
        codec=codec,
        saves_for_others=True,
    )
    return base
