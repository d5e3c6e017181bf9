"""The user's saved-tensor hooks, paused while torchkiln traces.

``torch.autograd.graph.saved_tensors_hooks`` (``save_on_cpu``, activation offloading or
checkpointing libraries) applies to every tensor autograd saves, and tracing runs autograd
on fake and functional tensors: a pack hook active at a compiled function's first call
would be handed those (and may copy them to the CPU, or keep them). Capture and the AOT
layer trace under :func:`paused_saved_tensors_hooks`; the compiled code then saves real
tensors through the user's hooks, as eager does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_WHY = "torchkiln is tracing: saved-tensor hooks are paused until it is done"


@contextlib.contextmanager
def paused_saved_tensors_hooks() -> Iterator[None]:
    """Saved-tensor hooks neither run nor may be pushed inside; the state before is restored."""
    autograd = torch._C._autograd
    before = autograd._saved_tensors_hooks_get_disabled_error_message()
    autograd._saved_tensors_hooks_disable(_WHY, False)  # False: hooks may be registered
    try:
        yield
    finally:
        if before is None:
            autograd._saved_tensors_hooks_enable()
        else:
            autograd._saved_tensors_hooks_disable(before, False)
