"""Debug backends that run the AOT-autograd layer's graphs with torch.fx as they are.

``aot_eager`` checks tracing, functionalization and the runtime (simple
partitioner, no decompositions); ``aot_eager_decomp_partition`` adds the
default decompositions and the min-cut partitioner, so a mismatch there
and not in ``aot_eager`` points at a decomposition or at the partitioner.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.fx as fx

from torchkiln.plugin import Backend, hookimpl


def aot_eager(gm: fx.GraphModule, example_inputs: list) -> Callable:
    """AOT autograd with the simple partitioner and no decompositions."""
    from torchkiln.aot import aot_autograd, run_boxed, simple_partition

    return aot_autograd(fw_compiler=run_boxed, partition_fn=simple_partition)(gm, example_inputs)


def aot_eager_decomp_partition(gm: fx.GraphModule, example_inputs: list) -> Callable:
    """AOT autograd with the default decompositions and the min-cut partitioner."""
    from torchkiln.aot import aot_autograd, default_decompositions, min_cut_partition, run_boxed

    return aot_autograd(
        fw_compiler=run_boxed,
        decompositions=default_decompositions(),
        partition_fn=min_cut_partition,
    )(gm, example_inputs)


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            "aot_eager",
            aot_eager,
            description="AOT autograd (joint trace, simple partition), graphs run by torch.fx",
            tags=("debug",),
        ),
        Backend(
            "aot_eager_decomp_partition",
            aot_eager_decomp_partition,
            description="aot_eager with core-aten decompositions and the min-cut partitioner",
            tags=("debug",),
        ),
    ]
