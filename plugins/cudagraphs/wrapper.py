"""The ``cudagraphs`` runtime wrapper: what ``mode="reduce-overhead"`` puts around any backend.

The core calls :func:`make` once per compiled model; the :class:`CudaGraphs` it returns
wraps each of the model's compiled graphs (forward, backward, inference, or a whole
backend callable) in a :class:`~torchkiln_cudagraphs.capture.CudaGraphRunner`, all of
them recording into one memory pool per device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from torchkiln_cudagraphs.capture import CudaGraphRunner
from torchkiln_cudagraphs.pool import GraphPool

log = logging.getLogger("torchkiln.cudagraphs")

NO_CUDA = (
    "cudagraphs: torch.cuda.is_available() is False, so the compiled model runs without "
    "CUDA graphs (mode='reduce-overhead' only reduces the overhead of CUDA graphs)"
)


class CudaGraphs:
    """One compiled model's CUDA graph state: its memory pools, per device."""

    def __init__(self) -> None:
        #: Per device, the pools in the order they were made; the last one takes recordings.
        self.pools: dict[int, list[GraphPool]] = {}
        #: Why some graphs run without CUDA graphs, each said once per compiled model.
        self.eager_reasons: set[str] = set()

    def pool_for(self, device_index: int, kind: str, fresh: bool = False) -> GraphPool:
        """The pool a ``kind`` graph records into: the device's latest, or a fresh one for
        a forward once the latest gave a forward's saved values to a backward, and when
        ``fresh`` asks for one."""
        pools = self.pools.setdefault(device_index, [])
        if fresh or not pools or (kind != "backward" and not pools[-1].takes_forwards()):
            pools.append(GraphPool())
        return pools[-1]

    def source_of(self, device_index: int, t: torch.Tensor) -> tuple[GraphPool, Any] | None:
        """The pool and the live output of its graphs that ``t`` is, if any."""
        for pool in reversed(self.pools.get(device_index, ())):
            out = pool.source_of(t)
            if out is not None:
                return pool, out
        return None

    def __call__(self, fn: Callable, kind: str) -> Callable:
        return CudaGraphRunner(fn, self, kind)


def make() -> Callable[[Callable, str], Callable]:
    """The wrapper of one compiled model; without CUDA, the graphs as they are (said once)."""
    if not torch.cuda.is_available():
        log.warning(NO_CUDA)
        return lambda fn, kind: fn
    return CudaGraphs()
