"""torchkiln_cudagraphs: CUDA graph capture and replay.

``cudagraphify(fn, example_inputs)`` is the reusable capture (the inductor
plugin's mode="reduce-overhead" can wrap its compiled graphs with it); the
``cudagraphs`` backend (``plugin.py``) applies it to the forward and
backward graphs of ``torchkiln.aot``.
"""

from torchkiln_cudagraphs.capture import CudaGraphRunner, cudagraphify, why_not_capturable

__all__ = ["CudaGraphRunner", "cudagraphify", "why_not_capturable"]
