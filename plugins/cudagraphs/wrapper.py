"""The ``cudagraphs`` runtime wrapper: what ``mode="reduce-overhead"`` puts around any backend.

The core calls :func:`make` once per compiled model; the :class:`CudaGraphs` it returns
wraps each of the model's compiled graphs (forward, backward, inference, or a whole
backend callable) in a :class:`~torchkiln_cudagraphs.capture.CudaGraphRunner`, all of
them recording into one memory pool per device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from torchkiln_cudagraphs.capture import CudaGraphRunner
from torchkiln_cudagraphs.pool import GraphPool

log = logging.getLogger("torchkiln.cudagraphs")

NO_CUDA = (
    "cudagraphs: torch.cuda.is_available() is False, so the compiled model runs without "
    "CUDA graphs (mode='reduce-overhead' only reduces the overhead of CUDA graphs)"
)


class CudaGraphs:
    """One compiled model's CUDA graph state: its memory pools, one per device."""

    def __init__(self) -> None:
        self.pools: dict[int, GraphPool] = {}
        #: Why some graphs run without CUDA graphs, each said once per compiled model.
        self.eager_reasons: set[str] = set()

    def pool(self, device_index: int) -> GraphPool:
        if device_index not in self.pools:
            self.pools[device_index] = GraphPool()
        return self.pools[device_index]

    def __call__(self, fn: Callable, kind: str) -> Callable:
        return CudaGraphRunner(fn, self, kind)


def make() -> Callable[[Callable, str], Callable]:
    """The wrapper of one compiled model; without CUDA, the graphs as they are (said once)."""
    if not torch.cuda.is_available():
        log.warning(NO_CUDA)
        return lambda fn, kind: fn
    return CudaGraphs()
