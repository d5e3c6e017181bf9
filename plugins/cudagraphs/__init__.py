"""torchkiln_cudagraphs: CUDA graph recording and replay, as a runtime wrapper and a backend.

``mode="reduce-overhead"`` asks the core for the ``cudagraphs`` runtime wrapper
(``wrapper.py``), which puts a :class:`CudaGraphRunner` (``capture.py``) around each
compiled graph of any backend; all graphs of a compiled model share one
:class:`GraphPool` (``pool.py``). The ``cudagraphs`` backend (``plugin.py``) is
``torchkiln.aot`` with that wrapper on.
"""

from torchkiln_cudagraphs.capture import CudaGraphRunner, why_not_capturable
from torchkiln_cudagraphs.pool import GraphPool

__all__ = ["CudaGraphRunner", "GraphPool", "why_not_capturable"]
