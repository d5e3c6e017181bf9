"""Entry point of the onnxrt backend plugin: FX → ONNX → onnxruntime.

Graphs go through ``torchkiln.aot.aot_autograd``: the forward and the
backward aten graphs are each converted to an ONNX model (our own converter,
``torchkiln_onnxrt.converter``) and run in an onnxruntime session. The backend
declares its capabilities (the ops with a converter): the core partitions each
graph, and ops without a converter run with the next backend of the chain
(``backend=["onnxrt", "inductor"]``; eager when onnxrt is named alone).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Set
from typing import Any

from torchkiln.plugin import Backend, Capabilities, Option, Requirement, hookimpl

OPTIONS = (
    Option(
        "providers",
        None,
        "onnxruntime execution providers in priority order; default: CUDA then CPU "
        "for graphs on a GPU, CPU otherwise",
        type=(tuple, list, type(None)),
    ),
    Option(
        "graph_optimization_level",
        "all",
        "onnxruntime graph optimizations: 'disable', 'basic', 'extended' or 'all'",
        type=str,
    ),
    Option(
        "intra_op_num_threads",
        None,
        "threads onnxruntime runs an op on; default: torch.get_num_threads()",
        type=(int, type(None)),
    ),
    Option(
        "dump_onnx_dir",
        None,
        "a folder to write every compiled graph to, as graph_<pid>_<n>.onnx",
        type=(str, type(None)),
    ),
)


class ConvertedOps(Set):
    """The aten overloads with a converter, read from the converter tables when the core
    first plans a graph: a process whose compiled graphs all come from the plan cache
    plans nothing, and imports neither the converters nor onnx."""

    @functools.cached_property
    def _ops(self) -> frozenset:
        from torchkiln_onnxrt import compiler  # noqa: F401 (its imports register the converters)
        from torchkiln_onnxrt.converter import CONVERTERS

        return frozenset(CONVERTERS)

    def __bool__(self) -> bool:
        return True  # there are converters: no need to import them to say so

    def __contains__(self, op: object) -> bool:
        return op in self._ops

    def __iter__(self) -> Iterator:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)


def compile_partition(gm: Any, example_inputs: list, **options: Any) -> Any:
    """``torchkiln_onnxrt.compiler.compile_aten_graph``, imported on the first conversion."""
    from torchkiln_onnxrt.compiler import compile_aten_graph

    return compile_aten_graph(gm, example_inputs, **options)


def capabilities() -> Capabilities:
    """The ops with a converter, and what loads compiled graphs (called on the first compile:
    imports onnxruntime; the converters and onnx come when a graph is converted)."""
    from torchkiln_onnxrt import cache
    from torchkiln_onnxrt.decompositions import decompositions

    return Capabilities(
        compile_partition=compile_partition,
        ops=ConvertedOps(),
        decompositions=decompositions,
        codec=cache.codec(),
    )


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            name="onnxrt",
            description="runs the graph through ONNX Runtime (FX -> ONNX -> onnxruntime)",
            requires=(
                Requirement("onnx", extra="onnxrt"),
                Requirement("onnxruntime", extra="onnxrt"),
            ),
            options=OPTIONS,
            capabilities=capabilities,
            dtypes=("bfloat16", "float16"),
            # symbolic graphs become models with dynamic axes; a converter that needs a
            # concrete size raises NeedsStaticShapes, and the core compiles that graph per size
            dynamic_shapes=True,
        )
    ]
