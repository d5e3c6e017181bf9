"""``torchkiln.counters``: process-wide event counts (frames, recompiles, cache hits, graph breaks).

A module of its own so that every layer (capture, the AOT layer, the caches on
disk) counts without importing another layer; ``torchkiln.reset()`` clears them.
"""

from __future__ import annotations

import collections


class KilnCounter(collections.Counter):
    """A ``Counter`` whose ``c[k] += 1`` stays in C.

    ``Counter`` defines ``__delitem__`` in Python, which routes every item
    assignment through Python too (3x slower); the cache-hit count is on
    the hot path of every call. ``del c[k]`` raises for a missing key.
    """

    __delitem__ = dict.__delitem__


class Counters(collections.defaultdict):
    """``counters[group]``: a :class:`KilnCounter` per group, made on first use.

    ``clear()`` empties every group but keeps it: the capture's hot path holds its group
    (``counters["cache"]``) and went on counting into a dropped one after a
    ``torchkiln.counters.clear()``, torch's habit for its own counters.
    """

    def __init__(self) -> None:
        super().__init__(KilnCounter)

    def clear(self) -> None:
        for group in self.values():
            group.clear()


#: ``counters[group][name]``, in the shape of torch's.
counters: Counters = Counters()
