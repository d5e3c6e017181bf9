"""The backend compile function: a torch-level graph in, a compiled callable out.

``compile_graph(gm, example_inputs, **options)`` hands the graph to the
shared AOT-autograd layer (``torchkiln.aot.aot_autograd``) with
:func:`compile_fx` as forward, backward and inference compiler, the
decompositions in :func:`decompositions` (core aten, minus the ops this
backend lowers whole, like gelu, layer_norm and softmax) and, as the pass
on the graph before it is traced, :func:`.fuse_attention.fuse_attention`
(explicit attention into SDPA calls). Compiled graphs go to the AOT
layer's on-disk plan cache as :class:`GraphArtifact` records
(:func:`plan_codec`), so another process compiling the same model generates
and compiles nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.fx import GraphModule

from torchkiln import logs
from torchkiln.aot import ArtifactCodec
from torchkiln.plugin import (
    Damaged,
    cache_dir,
    discard,
    read_entry,
    source_fingerprint,
    write_entry,
)

from .artifact import CompiledGraph, GraphArtifact
from .cpp_build import toolchain_id
from .device import device_caps
from .fuse_attention import fuse_attention
from .options import InductorOptions, parse_options

if TYPE_CHECKING:
    from .compile_fx import StartedGraph

_SOURCE = str(Path(__file__).parent)


@functools.cache
def lowered_ops() -> frozenset:
    """Ops the lowering handles whole (kept out of the decomposition table).

    Their names are kept in the cache, per torch version and this plugin's source: a process
    whose plans all come from the plan cache builds the table (which keys them) without
    importing the lowering, and with it the IR, the code generators and sympy."""
    entry = (
        cache_dir() / "inductor" / f"lowered-ops-{torch.__version__}-{source_fingerprint(_SOURCE)}"
    )
    try:
        names = read_entry(entry)
        if names is not None:
            return frozenset(_op_named(name) for name in names.decode().split())
    except (Damaged, AttributeError, ValueError):  # not whole, or an op torch lacks: rebuild
        discard(entry)
    from .lowering import LOWERINGS

    write_entry(entry, " ".join(sorted(str(op) for op in LOWERINGS)).encode())
    return frozenset(LOWERINGS)


def _op_named(name: str) -> torch._ops.OpOverload:
    """``torch.ops.aten.gelu.default`` from ``"aten.gelu.default"``."""
    namespace, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


#: ops without a lowering that decompose well into ops that have one
_EXTRA_DECOMPOSITIONS = (
    "native_layer_norm_backward",
    "native_group_norm",
    "native_group_norm_backward",
    "_native_batch_norm_legit_no_training",
    "leaky_relu",
    "elu",
    "hardtanh",
    "diagonal",
    "embedding_dense_backward",
    "leaky_relu_backward",
    "elu_backward",
    "hardtanh_backward",
    "upsample_nearest2d",
)


@functools.cache
def decompositions() -> dict:
    """Decomposition table for the AOT layer: core aten, keeping what we lower whole.

    Built once per process and shared by every compile (read it, don't modify it).
    """
    from torch._decomp import get_decompositions

    import torchkiln.aot as aot

    keep = lowered_ops()
    table = dict(aot.default_decompositions(keep=keep))
    extra = [getattr(torch.ops.aten, name) for name in _EXTRA_DECOMPOSITIONS]
    table.update({op: fn for op, fn in get_decompositions(extra).items() if op not in keep})
    return table


def _check_devices(example_inputs: list[Any]) -> None:
    """Refuse, before tracing, inputs on a device without a code generator."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            device_caps(x.device)


def _dump(compiled: Callable) -> GraphArtifact | None:
    return compiled.artifact if isinstance(compiled, CompiledGraph) else None


def _load(artifact: GraphArtifact) -> CompiledGraph:
    if logs.enabled("output_code"):
        logs.artifact("output_code", "(from the plan cache)\n%s", artifact.output_code())
    return artifact.load()


def plan_codec(options: InductorOptions) -> ArtifactCodec | None:
    """How compiled graphs are stored in the plan cache; ``None`` (no caching) when tracing:
    a cached plan would skip writing the trace."""
    if options.trace:
        return None
    salt = "|".join(
        (
            "inductor",
            repr(options),
            source_fingerprint(_SOURCE),
            toolchain_id(),
            f"tf32={torch.backends.cuda.matmul.allow_tf32}",  # fuse_attention reads it
        )
    )
    return ArtifactCodec(salt, dump=_dump, load=_load)


def compile_graph(gm: GraphModule, example_inputs: list[Any], **options: Any) -> Callable:
    """torchkiln backend entry point (``backend="inductor"``)."""
    opts = parse_options(options)
    _check_devices(example_inputs)
    import torchkiln.aot as aot

    compiler = _Compiler(opts)
    gpu = _triton_gpu(example_inputs)
    return aot.aot_autograd(
        fw_compiler=compiler,
        bw_compiler=compiler,
        inference_compiler=compiler,
        decompositions=decompositions(),
        cache=plan_codec(opts),
        before_trace=_compile_workers_starter(gpu),
        graph_pass=_attention_pass(opts),
        backward_ahead=gpu is not None,
    )(gm, example_inputs)


class _Compiler:
    """:func:`compile_fx` with the options bound, staged for the AOT layer's
    ``backward_ahead`` (``start``: :func:`start_compile_fx`)."""

    def __init__(self, options: InductorOptions):
        self.options = options

    def __call__(self, graph: GraphModule, inputs: list[Any]) -> Callable:
        from .compile_fx import compile_fx  # not imported by a process that loads every plan

        return compile_fx(graph, list(inputs), self.options)

    def start(self, graph: GraphModule, inputs: list[Any]) -> StartedGraph:
        from .compile_fx import start_compile_fx

        return start_compile_fx(graph, list(inputs), self.options)


def _attention_pass(options: InductorOptions) -> Callable[[GraphModule, list], GraphModule] | None:
    """:func:`fuse_attention` as the AOT layer's graph pass (it runs on plan-cache misses
    only: a second process that loads its plans needs no fake run of the graph), with the
    TF32 setting read now, as :func:`plan_codec` keys plans by it."""
    if not options.fuse_attention:
        return None
    return functools.partial(fuse_attention, cuda_tf32=torch.backends.cuda.matmul.allow_tf32)


def _triton_gpu(example_inputs: list[Any]) -> torch.device | None:
    """The GPU whose Triton kernels a graph of these inputs compiles (None: interpreted, or
    no GPU): where compile workers build them, and where compiling the backward with the
    forward (the AOT layer's ``backward_ahead``) lets both graphs' kernels build at once. On
    a CPU the backward waits for its first call: a graph run with grad enabled but never
    differentiated compiles no backward."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None
    return next(
        (x.device for x in example_inputs if isinstance(x, torch.Tensor) and x.is_cuda), None
    )


def _compile_workers_starter(gpu: torch.device | None) -> Callable[[], None] | None:
    """What starts Triton's compile workers for a graph on ``gpu`` (None: nothing to start).

    The workers take seconds to import torch and Triton; started before the AOT layer traces
    the graph, they are ready when its kernels are (``codegen/triton_workers``)."""
    if gpu is None:
        return None

    def start() -> None:
        from .codegen.triton_workers import warm_pool

        warm_pool(gpu)

    return start
