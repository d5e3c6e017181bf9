"""The default decomposition table: every op brought down to the core aten set.

Built from ``torch._decomp.decomposition_table`` (PrimTorch): an op is
decomposed when it is *not* tagged ``torch.Tag.core`` and a decomposition
exists. Random ops (tagged ``nondeterministic_seeded``) are never decomposed,
so a compiled graph draws the same random numbers as eager under a fixed
seed. A backend keeps more ops whole with ``keep=``, or edits the returned
dict (it is a fresh copy each call).

Some decompositions are wrong to use (:data:`KEEP_WHOLE`): the table never has them,
and :func:`keep_whole` takes them out of any other table (torch's
``core_aten_decompositions()`` has one) before a graph is traced with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from torch._decomp import decomposition_table

aten = torch.ops.aten

#: Ops whose decomposition gives wrong results:
#: - torch 2.13 decomposes the CPU flash attention forward into its math and a (B, H, T, T)
#:   "logsumexp" that the fused backward kernel, still recorded by autograd, accepts
#:   silently: gradients come out up to 70x off;
#: - ``diagonal_scatter``'s decomposition writes into a view of a clone (``prims.copy_to``).
#:   Decompositions run below the joint trace's functionalization, so the graph keeps a
#:   mutation whose result nothing reads, and a compiler that takes the graph as functional
#:   drops it: the diagonal came back unwritten (``torch.diag``'s backward, QR's, ...).
KEEP_WHOLE = frozenset(
    {aten._scaled_dot_product_flash_attention_for_cpu.default, aten.diagonal_scatter.default}
)


def keep_whole(table: Mapping[Callable, Callable]) -> dict[Callable, Callable]:
    """``table`` without the decompositions of :data:`KEEP_WHOLE` (a new dict)."""
    return {op: fn for op, fn in table.items() if op not in KEEP_WHOLE}


def core_aten_table() -> dict[Callable, Callable]:
    """torch's core-aten decomposition table as ``torch._decomp`` keeps it, minus
    :data:`KEEP_WHOLE` and random ops (a new dict): what backends that convert aten graphs
    start from. Random ops stay whole, as in :func:`default_decompositions`: decomposed,
    ``bernoulli`` draws ``rand_like`` numbers, not eager's, and a seed no longer repeats
    eager's dropout masks.

    Not ``torch._decomp.core_aten_decompositions()``: that is torch.export's table, which adds
    every CompositeImplicitAutograd op (the dispatcher decomposes them as the AOT layer
    traces anyway) and takes 0.1-0.2 s to build, most of the first call of a process that
    loads its compiled graphs from the plan cache.
    """
    from torch._decomp import _core_aten_decompositions_post_autograd

    table = keep_whole(_core_aten_decompositions_post_autograd())
    return {op: fn for op, fn in table.items() if not _draws_random_numbers(op)}


def _draws_random_numbers(op: Callable) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())


def default_decompositions(keep: Iterable[torch._ops.OpOverload] = ()) -> dict[Callable, Callable]:
    """The core-aten decomposition table, minus the overloads in ``keep``.

    ``keep`` may name overloads (``aten.gelu.default``) or packets
    (``aten.gelu``, meaning all its overloads).
    """
    kept: set[object] = set(KEEP_WHOLE)
    for op in keep:
        if isinstance(op, torch._ops.OpOverloadPacket):
            kept.update(getattr(op, name) for name in op.overloads())
        else:
            kept.add(op)
    return {
        op: fn
        for op, fn in decomposition_table.items()
        if isinstance(op, torch._ops.OpOverload)
        and torch.Tag.core not in op.tags
        and not _draws_random_numbers(op)
        and op not in kept
    }
