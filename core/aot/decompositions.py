"""The default decomposition table: every op brought down to the core aten set.

Built from ``torch._decomp.decomposition_table`` (PrimTorch): an op is
decomposed when it is *not* tagged ``torch.Tag.core`` and a decomposition
exists. Random ops (tagged ``nondeterministic_seeded``) are never decomposed,
so a compiled graph draws the same random numbers as eager under a fixed
seed. A backend keeps more ops whole with ``keep=``, or edits the returned
dict (it is a fresh copy each call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch._decomp import decomposition_table


def default_decompositions(keep: Iterable[torch._ops.OpOverload] = ()) -> dict[Callable, Callable]:
    """The core-aten decomposition table, minus the overloads in ``keep``.

    ``keep`` may name overloads (``aten.gelu.default``) or packets
    (``aten.gelu``, meaning all its overloads).
    """
    kept: set[object] = set()
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
        and torch.Tag.nondeterministic_seeded not in op.tags
        and op not in kept
    }
