"""CUDA graph capture and replay of a function of CUDA tensors.

``cudagraphify(fn, example_inputs)`` returns a callable that behaves like
``fn`` (called with tensors of the same sizes, dtypes and device) but, from
its second call on, replays a recorded ``torch.cuda.CUDAGraph`` instead of
launching each kernel from Python:

1. first call: ``fn`` runs eagerly (warm-up: lazy initialisation, autotuning,
   allocator pools) and the address of every input is noted;
2. second call: inputs still at the same address (parameters, buffers) are
   *static*: the graph reads them in place, never copied. Every other input
   gets a static buffer of its own; ``fn`` is recorded on those;
3. every call from then on copies the non-static inputs into their buffers,
   replays the graph, writes back inputs that ``fn`` mutates in place, and
   returns *clones* of the outputs, so a result stays valid after the next
   replay (as eager results do). A static input found at a new address is
   copied from then on, and the graph is recorded again once for it.

``fn`` runs under ``torch.no_grad()``: its outputs have no autograd history
(the cudagraphs backend gets gradients by capturing the forward and the
backward graphs of ``torchkiln.aot`` separately). Random ops draw from
torch's CUDA generator, which replays advance, but not in eager's order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchkiln.exc import KilnError

log = logging.getLogger("torchkiln.cudagraphs")


def why_not_capturable(example_inputs: Sequence[Any]) -> str | None:
    """Why a graph with these inputs cannot be recorded, or ``None`` if it can."""
    devices = set()
    for i, value in enumerate(example_inputs):
        if not isinstance(value, torch.Tensor):
            return f"input {i} is a {type(value).__name__}, not a tensor (dynamic shapes)"
        if value.device.type != "cuda":
            return f"input {i} is on {value.device}, not on a CUDA device"
        if not all(isinstance(d, int) for d in value.shape):
            return f"input {i} has symbolic sizes {tuple(value.shape)} (dynamic shapes)"
        devices.add(value.device)
    if len(devices) > 1:
        return f"inputs are on several devices: {sorted(map(str, devices))}"
    return None


def cudagraphify(fn: Callable[..., Any], example_inputs: Sequence[Any]) -> CudaGraphRunner:
    """``fn`` recorded into a CUDA graph on its second call and replayed afterwards.

    ``fn(*tensors)`` must return a tuple or list (of tensors, or values
    returned as they are); the runner returns a list.

    ``example_inputs`` (real or fake tensors) give the sizes, dtypes and
    device every call must have. Raises ``KilnError`` when they cannot be
    captured: non-tensor or symbolic-size inputs, CPU inputs, or no CUDA.
    """
    reason = why_not_capturable(example_inputs)
    if reason is None and not torch.cuda.is_available():
        reason = "torch.cuda.is_available() is False"
    if reason is not None:
        raise KilnError(f"cannot record a CUDA graph: {reason}")
    return CudaGraphRunner(fn, example_inputs)


def _signature(t: torch.Tensor) -> tuple:
    """Sizes, dtype and device ("cuda" and "cuda:<current>" are the same device)."""
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    return (tuple(t.shape), t.dtype, f"{t.device.type}:{index}")


def _version(t: torch.Tensor) -> int | None:
    """The in-place write counter (inference-mode tensors have none)."""
    return None if t.is_inference() else t._version


class CudaGraphRunner:
    """The callable :func:`cudagraphify` returns (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], example_inputs: Sequence[torch.Tensor]):
        self.fn = fn
        self.signatures = [_signature(t) for t in example_inputs]
        self.first_addresses: list[int] | None = None
        #: Inputs copied into static buffers on every call (the others are read in place).
        self.copied_inputs: set[int] = set()
        #: Inputs ``fn`` writes to (seen in the warm-up call through their version counters).
        self.mutated_inputs: set[int] = set()
        self.recordings = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_inputs: list[torch.Tensor] = []
        self.static_outputs: Any = None
        self.eager_reason: str | None = None

    def __call__(self, *args: torch.Tensor) -> list:
        self._check(args)
        if self.eager_reason is not None:
            return self._run_eagerly(args)
        if self.first_addresses is None:
            return self._warm_up(args)
        if self.graph is None or self._static_input_moved(args):
            self._record(args)
            if self.eager_reason is not None:
                return self._run_eagerly(args)
        return self._replay(args)

    def _check(self, args: Sequence[torch.Tensor]) -> None:
        if len(args) != len(self.signatures):
            raise KilnError(
                f"the CUDA graph was recorded for {len(self.signatures)} inputs, got {len(args)}"
            )
        for i, (arg, expected) in enumerate(zip(args, self.signatures)):
            if not isinstance(arg, torch.Tensor) or _signature(arg) != expected:
                got = _signature(arg) if isinstance(arg, torch.Tensor) else type(arg).__name__
                raise KilnError(
                    f"input {i} of a CUDA graph changed from (sizes, dtype, device) {expected} "
                    f"to {got}; a recorded graph replays one set of sizes only"
                )

    def _run_eagerly(self, args: Sequence[torch.Tensor]) -> list:
        with torch.no_grad():
            return list(self.fn(*args))

    def _warm_up(self, args: Sequence[torch.Tensor]) -> list:
        versions = [_version(a) for a in args]
        outputs = self._run_eagerly(args)
        self.first_addresses = [a.data_ptr() for a in args]
        self.mutated_inputs = {i for i, a in enumerate(args) if _version(a) != versions[i]}
        return outputs

    def _static_input_moved(self, args: Sequence[torch.Tensor]) -> bool:
        moved = {
            i
            for i, (arg, static) in enumerate(zip(args, self.static_inputs))
            if i not in self.copied_inputs
            and (arg.data_ptr() != static.data_ptr() or arg.stride() != static.stride())
        }
        if moved:
            log.info("cudagraphs: inputs %s moved; copying them from now on", sorted(moved))
            self.copied_inputs |= moved
        return bool(moved)

    def _record(self, args: Sequence[torch.Tensor]) -> None:
        assert self.first_addresses is not None
        self.static_inputs = []
        for i, arg in enumerate(args):
            if i in self.copied_inputs or arg.data_ptr() != self.first_addresses[i]:
                self.copied_inputs.add(i)
                # clone keeps dense strides, and makes overlapping ones contiguous.
                arg = arg.detach().clone()
            self.static_inputs.append(arg)
        self.graph = None
        self.static_outputs = None
        graph = torch.cuda.CUDAGraph()
        device = args[0].device if args else torch.device("cuda", torch.cuda.current_device())
        generator = torch.cuda.default_generators[device.index or 0]
        rng_before = generator.clone_state()
        try:
            with (
                torch.no_grad(),
                torch.cuda.device(device),
                torch.cuda.graph(graph, capture_error_mode="thread_local"),
            ):
                self.static_outputs = self.fn(*self.static_inputs)
        except Exception as e:
            # A failed recording leaves the CUDA generator marked as capturing, and every
            # later random op would fail: give it back its state from before the recording.
            generator.graphsafe_set_state(rng_before)
            self.eager_reason = f"{type(e).__name__}: {e}"
            log.warning(
                "cudagraphs: recording failed (%s); running this graph eagerly", self.eager_reason
            )
            return
        self.graph = graph
        self.recordings += 1

    def _replay(self, args: Sequence[torch.Tensor]) -> list:
        assert self.graph is not None
        with torch.no_grad():
            for i in self.copied_inputs:
                if args[i].data_ptr() != self.static_inputs[i].data_ptr():
                    self.static_inputs[i].copy_(args[i])
            self.graph.replay()
            for i in self.mutated_inputs & self.copied_inputs:
                args[i].copy_(self.static_inputs[i])
        return [o.clone() if isinstance(o, torch.Tensor) else o for o in self.static_outputs]
