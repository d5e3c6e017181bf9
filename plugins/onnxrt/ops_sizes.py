"""Converters of the nodes that compute sizes: ``sym_size`` and arithmetic on SymInts.

Their value is the SymInt ``meta["val"]`` holds, an expression over the inputs' sizes:
they emit nothing. The ops that take it compute it in ONNX from the inputs' shapes
(``GraphBuilder.ints``/``const``/``as_dtype``), and a size the graph returns is computed
from each call's arguments. Registered so that a chain keeps them with the ops that
use them, in one onnxrt partition.
"""

from __future__ import annotations

import operator

import torch

from torchkiln_onnxrt.converter import GraphBuilder, converts, meta_of

aten = torch.ops.aten


@converts(
    aten.sym_size.int,
    aten.sym_numel.default,
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.mod,
    operator.neg,
    torch.sym_max,
    torch.sym_min,
)
def size(b: GraphBuilder, node, *_, **__) -> int | torch.SymInt:
    return meta_of(node)
