"""The decomposition table the onnxrt backend's graphs are traced with.

Its own module, apart from the compiler: a process that loads its compiled graphs from
the plan cache needs the table (it is part of the plan cache's key) but no converter.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

from torchkiln.aot import core_aten_table, keep_whole

aten = torch.ops.aten

#: Ops decomposed on top of the core aten tables: ONNX has no single op for them.
EXTRA_DECOMPOSITIONS = (
    aten.native_batch_norm,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training,
    aten._batch_norm_with_update,
    aten._batch_norm_with_update_functional,
    aten._batch_norm_no_update,
    aten.native_layer_norm,
    aten.elu,
    aten.upsample_bilinear2d,
    aten.upsample_nearest2d,
    aten.linalg_vector_norm,
)


def decompositions() -> dict:
    """The decomposition table to trace graphs for this backend with.

    torch's core-aten table (``torchkiln.aot.core_aten_table``) and
    :data:`EXTRA_DECOMPOSITIONS` (not the AOT layer's default table: it brings some ops
    down to prims), keeping the ops of ``torchkiln.aot.KEEP_WHOLE`` whole.
    """
    table = core_aten_table()
    table.update(get_decompositions(list(EXTRA_DECOMPOSITIONS)))
    return keep_whole(table)
