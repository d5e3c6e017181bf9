"""The tvm compiler of one aten graph, and the decompositions it expects.

``compile_aten_graph`` is what the core calls for each forward, backward and inference
partition: the graph becomes a Relax function (a ``BlockBuilder`` function with one
dataflow block, ``get_attr`` constants as ``relax.const``, each node through
:data:`torchkiln_tvm.converters.CONVERTERS`), ``tvm.compile`` builds it for the target
(``llvm`` with the host's ``-mcpu``, or ``cuda``; its matmuls and convolutions calling
torch's kernels (:mod:`torchkiln_tvm.extern`) and its other kernels given a default
schedule (:mod:`torchkiln_tvm.schedule` on CPU, dlight's GPU rules through
:mod:`torchkiln_tvm.gpu_schedule` on CUDA) or tuned ones), and
:class:`~torchkiln_tvm.runtime.TVMGraph` runs it in a ``relax.VirtualMachine``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._decomp import get_decompositions
from torch.utils._pytree import tree_leaves

import tvm
from torchkiln import logs
from torchkiln.aot import core_aten_table, keep_whole
from torchkiln.exc import InvalidOptionError, KilnError
from torchkiln.index_checks import index_checks
from torchkiln_tvm import gpu_schedule, schedule, targets, tuning
from torchkiln_tvm.converters import (
    CONSTANT_OPS,
    CONVERTERS,
    VIEW_OPS,
    Context,
    dtype_name,
    tvm_tensor,
)
from torchkiln_tvm.runtime import TVMGraph
from tvm import relax

aten = torch.ops.aten

#: Ops decomposed on top of torch's core-aten table: Relax's batch norm computes batch
#: statistics whatever the mode, and the norms' saved statistics must come from ops
#: with converters for the backward to read them.
EXTRA_DECOMPOSITIONS = (
    aten.native_batch_norm,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training,
    aten._batch_norm_with_update,
    aten._batch_norm_with_update_functional,
    aten._batch_norm_no_update,
    aten.native_layer_norm,
    aten.upsample_bilinear2d,
    aten.upsample_nearest2d,
    aten.linalg_vector_norm,
)


def decompositions() -> dict:
    """torch's core-aten table and :data:`EXTRA_DECOMPOSITIONS`, minus ``KEEP_WHOLE``."""
    table = core_aten_table()
    table.update(get_decompositions(list(EXTRA_DECOMPOSITIONS)))
    return keep_whole(table)


def compile_aten_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    *,
    target: str | None = None,
    opt_level: int = 3,
    cache_dir: str | None = None,
    tuning_trials: int = 0,
    tuning_time_budget_s: float | None = None,
    default_schedule: bool = True,
    extern_ops: bool = True,
    fast_math: bool = True,
) -> Callable:
    """Compile a functional aten graph to ``compiled(*flat_tensors) -> list``.

    ``tuning_trials > 0`` builds the kernels with MetaSchedule's schedules
    (:mod:`torchkiln_tvm.tuning`, records in ``cache_dir``, at most
    ``tuning_time_budget_s`` seconds of tuning a graph); on CPU ``default_schedule``
    gives the others a fixed loop order and vectorization (:mod:`torchkiln_tvm.schedule`),
    on CUDA dlight's rules schedule them (:mod:`torchkiln_tvm.gpu_schedule`);
    ``extern_ops`` has the matmuls and convolutions call torch's kernels; on CPU
    ``fast_math`` makes float32 ``exp``, ``tanh`` and ``erf`` polynomials
    (:mod:`torchkiln_tvm.fastmath`).
    """
    device = graph_device(gm)
    tvm_target = targets.resolve(target, device)
    mod, copies = to_relax(gm, extern_ops=extern_ops)
    if logs.enabled("output_code"):
        logs.artifact("output_code", "tvm relax module:\n%s", mod.script())
    cpu = tvm_target.kind.name == "llvm"
    if not cpu:
        check_cpu_only_options(default_schedule=default_schedule, fast_math=fast_math)
    with tvm.transform.PassContext(opt_level=opt_level):
        database = None
        if tuning_trials:
            database, tvm_target = tuning.tuned_records(
                mod,
                tvm_target,
                trials=tuning_trials,
                time_budget_s=tuning_time_budget_s,
                cache_dir=cache_dir,
                fast_math=fast_math and cpu,
            )
        if cpu:
            pipeline = schedule.cpu_pipeline(
                tvm_target,
                database=database,
                default_schedule=default_schedule,
                fast_math=fast_math,
            )
        else:
            pipeline = gpu_schedule.gpu_pipeline(tvm_target, database=database)
        executable = tvm.compile(mod, target=tvm_target, relax_pipeline=pipeline)
    return TVMGraph(executable, device, output_values(gm), copies, index_checks(gm))


def graph_device(gm: fx.GraphModule) -> torch.device:
    """The one device of the graph's tensors (0-dim CPU tensors go with any)."""
    devices = {
        v.device
        for node in gm.graph.nodes
        for v in tree_leaves(node.meta.get("val"))
        if isinstance(v, torch.Tensor) and not (v.device.type == "cpu" and v.dim() == 0)
    }
    if len(devices) > 1:
        raise KilnError(
            f"the tvm backend runs a graph on one device; this one has tensors on "
            f"{sorted(map(str, devices))}"
        )
    return devices.pop() if devices else torch.device("cpu")


def output_values(gm: fx.GraphModule) -> list[torch.Tensor]:
    output = gm.graph.output_node()
    return [n.meta["val"] for n in tree_leaves(output.args[0])]


def to_relax(
    gm: fx.GraphModule, *, extern_ops: bool = False
) -> tuple[tvm.IRModule, frozenset[int]]:
    """The Relax module of ``gm`` (function ``main``), and which of its outputs may share
    memory with an input or a constant (the runtime copies those). ``extern_ops``: its
    matmuls and convolutions call torch's kernels (:mod:`torchkiln_tvm.extern`)."""
    bb = relax.BlockBuilder()
    cx = Context(bb, extern_ops=extern_ops)
    params = []
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            raise KilnError(
                f"the tvm backend takes tensor inputs only; input {node.name} is {value!r}"
            )
        struct = relax.TensorType(list(value.shape), dtype_name(value.dtype))
        params.append(relax.Var(node.name, struct))
        cx.values[node] = params[-1]
    output = gm.graph.output_node()
    outputs = list(tree_leaves(output.args[0]))
    with bb.function("main", params):
        with bb.dataflow():
            for node in gm.graph.nodes:
                if node.op == "get_attr":
                    cx.values[node] = relax.const(tvm_tensor(getattr(gm, node.target)))
                elif node.op == "call_function":
                    cx.values[node] = bb.emit(convert(cx, node))
            results = bb.emit_output(relax.Tuple([cx.values[n] for n in outputs]))
        bb.emit_func_output(results)
    mod = bb.get()
    check_shapes(mod, outputs, gm)
    return mod, frozenset(k for k, node in enumerate(outputs) if may_alias_input(node))


def convert(cx: Context, node: fx.Node) -> relax.Expr:
    converter = CONVERTERS.get(node.target)
    if converter is None:
        raise KilnError(
            f"the tvm backend has no converter for {node.target}; the core partitions "
            "graphs so that it never gets one (report this graph)"
        )
    return converter(cx, node)


def may_alias_input(node: fx.Node) -> bool:
    """Whether ``node``'s Relax value may be an input's or a constant's memory."""
    while node.op == "call_function" and node.target in VIEW_OPS:
        node = node.args[0]
    return node.op in ("placeholder", "get_attr") or node.target in CONSTANT_OPS


def check_shapes(mod: tvm.IRModule, outputs: list[fx.Node], gm: fx.GraphModule) -> None:
    """Each output's Relax shape and dtype are torch's: else a converter is wrong."""
    fields = mod["main"].ret_ty.fields
    for k, (field, node) in enumerate(zip(fields, outputs)):
        value = node.meta["val"]
        shape = [int(d) for d in field.shape.values]
        if shape != list(value.shape) or field.dtype != dtype_name(value.dtype):
            raise KilnError(
                f"the tvm converter of {node.target} made output {k} of shape {shape} and "
                f"dtype {field.dtype}, torch's is {list(value.shape)} {value.dtype}; report "
                f"this graph:\n{gm.print_readable(False)}"
            )


def check_cpu_only_options(*, default_schedule: bool, fast_math: bool) -> None:
    """Turning off ``default_schedule`` or ``fast_math`` means nothing on CUDA: say so."""
    if not (default_schedule and fast_math):
        name = "default_schedule" if not default_schedule else "fast_math"
        raise InvalidOptionError(
            f"option {name!r} of backend 'tvm' applies to CPU targets only: on CUDA every "
            "kernel takes dlight's schedule, and exp, tanh and erf are the GPU's own; "
            f"leave {name} at its default"
        )


def check_options(options: Mapping[str, Any]) -> None:
    """What the option schema can't check, before any partition is compiled (whose
    errors send it to the next backend): that the target runs here, that no CPU-only
    option is turned off for a CUDA target, that tuning can, and that no tuning option is
    given without ``tuning_trials`` (it would do nothing)."""
    target = options.get("target")
    if target is not None and targets.resolve(target, None).kind.name != "llvm":
        check_cpu_only_options(
            default_schedule=options.get("default_schedule", True),
            fast_math=options.get("fast_math", True),
        )
    if not options.get("tuning_trials"):
        given = [
            name for name in ("tuning_time_budget_s", "cache_dir") if options.get(name) is not None
        ]
        if given:
            raise InvalidOptionError(
                f"option {given[0]!r} of backend 'tvm' only applies to MetaSchedule tuning: "
                "pass tuning_trials > 0 with it (or mode='max-autotune')"
            )
        return
    tuning.check_usable()
