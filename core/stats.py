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


#: ``counters[group][name]``, in the shape of torch's.
counters: collections.defaultdict[str, collections.Counter] = collections.defaultdict(KilnCounter)
