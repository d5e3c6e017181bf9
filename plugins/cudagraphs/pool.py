"""The memory pool all CUDA graphs of one compiled model share, and the outputs they hand out.

Graphs recorded into one pool reuse each other's freed blocks, so the forward and
backward of a training step, and the graphs between graph breaks, need about the
memory eager needs instead of a pool each. The price is a rule about outputs: every
recording gets the next *order number*; a graph keeps its own outputs allocated, so
a later recording never takes them, but it may take the blocks an earlier graph freed
(its intermediates). Replaying the graph numbered ``n`` therefore overwrites the
outputs of every graph numbered ``n`` or more. Outputs are handed out without a copy,
as tensors with a storage of their own over the graph's memory; when a replay is about
to overwrite the ones still alive, their storages are poisoned: touching them raises
an error that says how to keep them (clone them), as torch.compile's CUDA graphs do.
A torch build that cannot poison storages gets copies instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.multiprocessing.reductions import StorageWeakRef

OVERWRITTEN = (
    "torchkiln: this tensor is an output of a CUDA graph (mode='reduce-overhead') and a later "
    "call of the compiled model has overwritten it. Keep it across calls by cloning it "
    "(out = model(x).clone()), or compile with mode='default'."
)
OVERWRITTEN_GRAD = (
    " If it is a .grad that a recorded backward created, set .grad to None before each "
    "backward (optimizer.zero_grad()), or create the .grad tensors before the compiled "
    "model's second call (one eager step does) so gradients are added into them."
)

_poison = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)


@dataclass
class _HandedOut:
    order: int
    storage: StorageWeakRef
    data_ptr: int
    message: str


class GraphPool:
    """One CUDA memory pool, the recordings' order numbers and the live outputs they gave."""

    def __init__(self) -> None:
        self.handle = torch.cuda.graph_pool_handle()
        self.next_order = 0
        self.handed_out: list[_HandedOut] = []
        #: The latest graph recorded here: CUDA releases a pool when its last graph is
        #: destroyed, and a released pool cannot be recorded into again.
        self.latest: torch.cuda.CUDAGraph | None = None

    def new_order(self, graph: torch.cuda.CUDAGraph) -> int:
        """The order number of ``graph``, just recorded into this pool."""
        self.latest = graph
        self.next_order += 1
        return self.next_order - 1

    def overwrite_from(self, order: int) -> None:
        """Poison the live outputs of graphs numbered ``order`` or more: a replay will reuse them."""
        keep = []
        for out in self.handed_out:
            if out.storage.expired():
                continue
            if out.order < order:
                keep.append(out)
                continue
            _poison(out.storage.cdata, out.message)  # takes the storage's weak pointer
        self.handed_out = keep

    def hand_out(self, order: int, static: torch.Tensor, is_grad: bool) -> torch.Tensor:
        """``static``'s values, valid until a replay overwrites them (see the module docstring)."""
        if _poison is None:
            return static.clone()
        storage = torch._C._construct_storage_from_data_pointer(
            static.untyped_storage().data_ptr(), static.device, static.untyped_storage().nbytes()
        )
        out = torch.empty(0, dtype=static.dtype, device=static.device)
        out.set_(storage, static.storage_offset(), static.shape, static.stride())
        message = OVERWRITTEN + (OVERWRITTEN_GRAD if is_grad else "")
        self.handed_out.append(
            _HandedOut(order, StorageWeakRef(storage), storage.data_ptr(), message)
        )
        return out

    def owns(self, t: torch.Tensor) -> bool:
        """Whether ``t`` is a live output of this pool's graphs (so at a stable address)."""
        ptr = t.untyped_storage().data_ptr()
        return any(out.data_ptr == ptr and not out.storage.expired() for out in self.handed_out)
