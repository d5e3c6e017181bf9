"""``as_strided`` reads a storage, whichever view of it its operand is.

``as_strided(x, size, stride, offset)`` addresses the storage behind ``x``
from its beginning: ``x[2:]`` or ``x.t()`` in its place give the same
result. A backend holds values of its own, though: it may copy a slice out,
or keep a transposed value dense, and would then address the wrong memory.
So the traced graphs name the view chain's root as the operand: the graph
input or computed value that owns the storage. (Inputs are traced starting
at their storage's beginning: the capture passes an input that ``as_strided``
reads at an explicit offset as its whole storage, see ``capture.aliasing``.)
"""

from __future__ import annotations

import torch
from torch import fx

aten = torch.ops.aten

#: ops whose result views their first argument's storage, of the same dtype
VIEW_OPS = frozenset(
    {
        aten.alias.default,
        aten.as_strided.default,
        aten.detach.default,
        aten.diagonal.default,
        aten.expand.default,
        aten.permute.default,
        aten.select.int,
        aten.slice.Tensor,
        aten.squeeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.t.default,
        aten.transpose.int,
        aten.unfold.default,
        aten.unsqueeze.default,
        aten.view.default,
        aten._unsafe_view.default,
    }
)

#: ops that read their first argument's storage by strides and an offset
STORAGE_READERS = frozenset({aten.as_strided.default, aten.as_strided_copy.default})


def storage_root(node: fx.Node) -> fx.Node:
    """The node that owns the storage ``node`` views (``node`` itself if it is no view)."""
    while node.op == "call_function" and node.target in VIEW_OPS:
        node = node.args[0]
    return node


def read_storage_roots(graph: fx.Graph) -> None:
    """Give each ``as_strided`` the root of its operand's view chain, in place (the views
    left unread are dead code)."""
    for target in STORAGE_READERS:
        for node in graph.find_nodes(op="call_function", target=target):
            node.update_arg(0, storage_root(node.args[0]))
