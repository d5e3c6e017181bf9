"""The memory pool the CUDA graphs of one compiled model share, and the outputs they hand out.

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

One exception makes training fit in eager's memory: the values a forward saves for its
backward are *released* to the backward's recording (:meth:`GraphPool.release`), which
frees each after its last use, as eager's autograd does, and reuses its blocks. The
backward's replays then overwrite those saved values (poisoned as above: a second
backward of one step, ``retain_graph=True``, is caught), and the pool takes no further
forward recordings: the next forward recorded for the model gets a fresh pool, so that
no graph recorded later can take the released blocks that replays of the forward write.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

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
OVERWRITTEN_SAVED = (
    " If it is a value a forward saved for its backward, the backward overwrote it: a "
    "second backward through one step (retain_graph=True) needs mode='default'."
)

_poison = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)


@dataclass
class _HandedOut:
    order: int
    storage: StorageWeakRef
    data_ptr: int
    message: str
    #: Where it came from: the recording (``capture.Recording``, held weakly: a pool keeps
    #: no recording alive) and its output position.
    recording: weakref.ref
    index: int


@dataclass
class _Released:
    """Output ``index`` of the recording ``recording_id`` names (a forward's saved value),
    given to a backward's recording; ``storage``: its owning storage, which that one freed."""

    recording_id: int
    index: int
    storage: StorageWeakRef


class GraphPool:
    """One CUDA memory pool, the recordings' order numbers and the live outputs they gave."""

    def __init__(self) -> None:
        self.handle = torch.cuda.graph_pool_handle()
        self.next_order = 0
        self.handed_out: list[_HandedOut] = []
        self.released: list[_Released] = []
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
        self._poison_where(lambda out: out.order >= order)

    def holds_live_gradients_from(self, order: int) -> bool:
        """Whether an output of a backward graph numbered ``order`` or more is still alive:
        a replay of graph ``order`` would overwrite (poison) it."""
        for out in self.handed_out:
            if out.order >= order and not out.storage.expired():
                recording = out.recording()
                if recording is not None and recording.runner.kind == "backward":
                    return True
        return False

    def overwrite_released(self, released: frozenset[tuple[int, int]]) -> None:
        """Poison the live handed-out copies of the released outputs a replay may overwrite
        (``reused_released``). Other outputs at those blocks are safe: a graph recorded
        while one held a block did not take it, and a later one is a higher order number."""
        if released:
            self._poison_where(lambda out: (id(out.recording()), out.index) in released)

    def _poison_where(self, overwritten) -> None:
        keep = []
        for out in self.handed_out:
            if out.storage.expired():
                continue
            if not overwritten(out):
                keep.append(out)
                continue
            _poison(out.storage.cdata, out.message)  # takes the storage's weak pointer
        self.handed_out = keep

    def hand_out(
        self, order: int, static: torch.Tensor, recording: Any, index: int, message: str
    ) -> torch.Tensor:
        """``static``'s values, valid until a replay overwrites them (see the module docstring)."""
        if _poison is None:
            return static.clone()
        out = alias_of(static)
        storage = out.untyped_storage()
        self.handed_out.append(
            _HandedOut(
                order,
                StorageWeakRef(storage),
                storage.data_ptr(),
                message,
                weakref.ref(recording),
                index,
            )
        )
        return out

    def source_of(self, t: torch.Tensor) -> _HandedOut | None:
        """The live output of this pool's graphs that ``t`` is (so at a stable address)."""
        ptr = t.untyped_storage().data_ptr()
        for out in reversed(self.handed_out):
            if out.data_ptr == ptr and not out.storage.expired():
                return out
        return None

    def release(self, recording: Any, index: int, owning: torch.Tensor) -> None:
        """``owning``, output ``index`` of ``recording``, goes to a backward's recording to free."""
        storage = StorageWeakRef(owning.untyped_storage())
        self.released.append(_Released(id(recording), index, storage))

    def reused_released(self) -> frozenset[tuple[int, int]]:
        """``(id(recording), index)`` of the released outputs freed by now: a graph recorded
        up to now may have taken their blocks."""
        return frozenset((r.recording_id, r.index) for r in self.released if r.storage.expired())

    def takes_forwards(self) -> bool:
        """Whether a forward may be recorded here (none may once a value was released)."""
        return not self.released


def alias_of(static: torch.Tensor) -> torch.Tensor:
    """A tensor over ``static``'s memory that does not keep that memory allocated."""
    storage = torch._C._construct_storage_from_data_pointer(
        static.untyped_storage().data_ptr(), static.device, static.untyped_storage().nbytes()
    )
    out = static.new_empty(0)
    out.set_(storage, static.storage_offset(), static.shape, static.stride())
    return out
