"""CUDA graph recording and replay of one compiled callable.

:class:`CudaGraphRunner` behaves like the function it wraps and keeps one recording
per *signature* of its inputs (sizes, strides, dtypes, devices, non-tensor values),
at most ``MAX_RECORDINGS`` of them; beyond that, and for calls that cannot be
recorded (CPU tensors, a synchronizing op), it runs the function as it is and says
why once. Each recording (:class:`Recording`) goes through three calls:

1. warm-up: the function runs eagerly (lazy initialisation, autotuning, allocator
   pools), the address of every input is noted, and the inputs it writes to; where an
   input moved since the warm-up before, the next call warms up again (up to
   ``WARM_UPS`` calls: see :meth:`Recording.warms_up_again`);
2. record: inputs still at the same address (parameters, buffers) and outputs of the
   model's recorded graphs (the saved values of a recorded forward) are *static*: the
   graph reads them in place, never copied; every other input gets a buffer of its own.
   A backward's recording is handed the forward's saved values themselves, to free after
   their last use (``GraphPool.release``). The function is recorded into the compiled
   model's shared :class:`~torchkiln_cudagraphs.pool.GraphPool`, then replayed;
3. replay: the non-static inputs are copied into their buffers, the graph replays,
   inputs the function writes to get the new values, and the outputs are handed out
   by the pool, which poisons them once a later replay overwrites them (a backward
   whose replay would overwrite gradients still in use runs eagerly instead). A static
   input found at a new address is copied from then on, and the graph recorded again.

Random ops draw from torch's CUDA generator, which every replay advances (new
numbers each call, as in eager, though not eager's numbers for a given seed).
"""

from __future__ import annotations

import logging
import operator
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from torchkiln.plugin import tensors_check
from torchkiln_cudagraphs.pool import (
    OVERWRITTEN,
    OVERWRITTEN_GRAD,
    OVERWRITTEN_SAVED,
    GraphPool,
    alias_of,
)

log = logging.getLogger("torchkiln.cudagraphs")

#: Recordings one runner keeps (one per input signature: dynamic shapes record each
#: size they meet); calls with a new signature beyond this run without CUDA graphs.
MAX_RECORDINGS = 8
#: Most warm-up calls of one recording (see :meth:`Recording.warms_up_again`).
WARM_UPS = 2


def why_not_capturable(args: Sequence[Any]) -> str | None:
    """Why a call with these arguments cannot be recorded, or ``None`` if it can."""
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    devices = set()
    for i, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            if value.device.type != "cuda":
                return f"input {i} is on {value.device}, not on a CUDA device"
            devices.add(value.device)
    if len(devices) > 1:
        return f"inputs are on several devices: {sorted(map(str, devices))}"
    return None


def signature(args: Sequence[Any]) -> tuple:
    """What a recording is specialised on: tensors' layout and device, other values as they are."""
    return tuple(
        (a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args
    )


KEEPS_SAVED = (
    "the backward keeps its graph (retain_graph=True or create_graph=True), and its CUDA "
    "graph overwrites the values the forward saved once it has read them"
)


OUTPUTS_ALIVE = (
    "the gradients its last replay handed out are still in use (a second backward through "
    "one step, retain_graph=True), and a replay would overwrite them"
)


def _keeps_graph() -> bool:
    """Whether the autograd pass running now keeps its graph for another backward."""
    return torch._C._autograd._get_current_graph_task_keep_graph()


#: cuBLAS keeps a workspace per handle (one per thread: a backward runs on autograd's) and
#: stream for the life of the process, 32 MiB each on Hopper. Dropped before and after
#: every warm-up and recording, as torch.compile's CUDA graphs do: a warm-up's would stay
#: in the default pool beside the one recorded into the graph pool, and a graph must never
#: bake in a workspace that lives outside its pool, which dropping it would free for
#: others to reuse. A dropped recorded workspace is a freed block of the pool, reused by
#: later recordings as any intermediate is (``pool``'s order numbers cover it).
_clear_cublas_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None)


def _version(t: torch.Tensor) -> int | None:
    """The in-place write counter (inference-mode tensors have none)."""
    return None if t.is_inference() else t._version


class CudaGraphRunner:
    """``fn`` with its calls recorded into CUDA graphs and replayed (see the module docstring).

    ``model`` is the compiled model's shared state (``wrapper.CudaGraphs``): its pools and
    ``model.eager_reasons``, the reasons already given for running without graphs.
    """

    def __init__(self, fn: Callable[..., Any], model: Any, kind: str):
        self.fn = fn
        self.model = model
        self.kind = kind
        #: A recording per input signature, or why calls with that signature run eagerly.
        self.recordings: dict[tuple, Recording | str] = {}
        #: The recording the latest call used: most calls replay it (``Recording.accepts``).
        self.latest: Recording | None = None

    def __call__(self, *args: Any) -> Any:
        return self.call_boxed(list(args))

    def call_boxed(self, args: list) -> Any:
        """The call with the arguments in a list: a recording of a function that takes them
        boxed (``torchkiln.aot``'s backward) frees each after its last use, as it does."""
        latest = self.latest
        if latest is not None and latest.accepts(args):
            return latest.replay_accepted(args)
        key = signature(args)
        recording = self.recordings.get(key)
        if recording is None:
            recording = self.recordings[key] = self._new_recording(args)
        if isinstance(recording, str):
            return self.run_eagerly(args, recording)
        self.latest = recording
        return recording(args)

    def _new_recording(self, args: Sequence[Any]) -> Recording | str:
        reason = why_not_capturable(args)
        if reason is not None:
            return reason
        if sum(isinstance(r, Recording) for r in self.recordings.values()) >= MAX_RECORDINGS:
            return f"it met more than {MAX_RECORDINGS} input signatures (sizes, strides)"
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        index = device.index if device is not None else None
        device = torch.device("cuda", torch.cuda.current_device() if index is None else index)
        return Recording(self, device)

    def run_eagerly(self, args: list, reason: str) -> Any:
        """Run ``fn`` as it is; the first time the compiled model meets ``reason``, say why."""
        if reason not in self.model.eager_reasons:
            self.model.eager_reasons.add(reason)
            log.warning("cudagraphs: a %s graph runs without CUDA graphs: %s", self.kind, reason)
        return self.run_boxed(args)

    def run_boxed(self, args: list) -> Any:
        """``fn`` on ``args``, which a function that takes them boxed empties, freeing each
        value after its last use (a backward's saved values: eager's peak memory)."""
        call_boxed = getattr(self.fn, "call_boxed", None)
        return call_boxed(args) if call_boxed is not None else self.fn(*args)


class Recording:
    """One CUDA graph of a runner's function, for one signature of its inputs."""

    def __init__(self, runner: CudaGraphRunner, device: torch.device):
        self.runner = runner
        self.device = device
        self.pool: GraphPool | None = None
        self.warm_addresses: list[int] | None = None
        self.warm_ups = 0
        #: Inputs copied into buffers of their own on every call (the others are read in place).
        self.copied: set[int] = set()
        #: Inputs the function writes to (seen in the warm-up through their version counters).
        self.mutated: set[int] = set()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.order = -1
        #: The copied inputs' buffers, and the addresses the graph reads the others at.
        self.buffers: dict[int, torch.Tensor] = {}
        self.addresses: list[int] = []
        self.static_outputs: list[Any] = []
        self.outputs_spec: pytree.TreeSpec | None = None
        #: Outputs that are views of an input: output -> (input, element offset), rebuilt
        #: as views of the caller's tensor.
        self.input_views: dict[int, tuple[int, int]] = {}
        #: Outputs released to a backward's recording (``static_outputs`` holds aliases of them).
        self.released: set[int] = set()
        #: The released outputs whose blocks this graph may have taken: its replays overwrite
        #: them (``GraphPool.overwrite_released``).
        self.reuses: frozenset[tuple[int, int]] = frozenset()
        #: Whether a recording of this backward freed the saved values it reads: a call that
        #: keeps them (``retain_graph``) runs eagerly, and a recording again goes to a fresh
        #: pool, where its allocations cannot land on them.
        self.frees_saved = False
        self.eager_reason: str | None = None
        #: What ``accepts`` compares a call's arguments with (None until recorded).
        self.expected: _Expected | None = None

    def accepts(self, args: Sequence[Any]) -> bool:
        """Whether ``args`` replay the recorded graph as it is: the inputs it reads in place
        where it reads them, the copied ones of the recorded layout, the rest equal. What
        the signature and ``_static_input_moved`` would find, in a few list comparisons."""
        expected = self.expected
        return expected is not None and expected.matches(args)

    def replay_accepted(self, args: list) -> Any:
        """The replay of a call ``accepts`` let through."""
        if self.runner.kind == "backward" and self.frees_saved and _keeps_graph():
            return self.runner.run_eagerly(args, KEEPS_SAVED)
        if self._would_overwrite_gradients():
            return self.runner.run_eagerly(args, OUTPUTS_ALIVE)
        return self._replay(args)

    def _would_overwrite_gradients(self) -> bool:
        """Whether a replay or a new recording of this backward would overwrite gradients
        that an earlier replay handed out and autograd still keeps as .grad, unseen by the
        caller (a forward's outputs are the caller's: poisoned, the error says to clone).
        Only a backward that keeps the saved values (recorded by a pass that kept its
        graph) can run twice in one step: one that frees them runs eagerly in a pass that
        keeps the graph, and autograd allows no pass after one that does not."""
        return (
            self.runner.kind == "backward"
            and not self.frees_saved
            and self.graph is not None
            and self.pool.holds_live_gradients_from(self.order)
        )

    def __call__(self, args: list) -> Any:
        if self.eager_reason is not None:
            return self.runner.run_eagerly(args, self.eager_reason)
        if self.warm_addresses is None or self.warms_up_again(args):
            return self._warm_up(args)
        if self._would_overwrite_gradients():
            return self.runner.run_eagerly(args, OUTPUTS_ALIVE)
        # a backward that keeps its graph (retain_graph, create_graph) keeps the saved values
        keeps_saved = self.runner.kind == "backward" and _keeps_graph()
        if self.graph is None or self._static_input_moved(args):
            self._record(args, release_saved=not keeps_saved)
            if self.eager_reason is not None:
                return self.runner.run_eagerly(args, self.eager_reason)
            self.expected = _Expected(args, self.copied, self.addresses)
        if keeps_saved and self.frees_saved:
            return self.runner.run_eagerly(args, KEEPS_SAVED)
        return self._replay(args)

    def warms_up_again(self, args: Sequence[Any]) -> bool:
        """Whether this call warms up once more instead of recording, fewer than
        :data:`WARM_UPS` having run: always for a training step's graphs (forwards and
        backwards), and for others where a tensor input that is no output of a recorded
        graph moved since the last warm-up.

        A training loop's first steps allocate differently from the later ones (the
        optimizer's state appears, eager warm-ups allocate what replays do not), so the
        loss's gradient, the backward's input, may land in another block each step
        until then. Where it settles by the recording (nanoGPT on the H200), the graph
        reads it in place; where it still moves then (the chain and the MLP), it is
        copied. Forwards and backwards warm up alike so that they record in the same
        step, each forward before its backward: a forward recorded a step before its
        backward would hold every saved value while that backward warms up again eagerly,
        which frees none of them as it goes (a recorded backward frees them:
        ``Recording.release``), and that step's peak memory exceeded eager's (ResNet-18
        training +26% on the H200)."""
        if self.graph is not None or self.warm_ups >= WARM_UPS:
            return False
        if self.runner.kind in ("forward", "backward"):
            return True
        model, index = self.runner.model, self.device.index
        return any(
            isinstance(arg, torch.Tensor)
            and arg.data_ptr() != address
            and model.source_of(index, arg) is None
            for arg, address in zip(args, self.warm_addresses)
        )

    def _warm_up(self, args: list) -> Any:
        self.warm_ups += 1
        self.warm_addresses = [a.data_ptr() if isinstance(a, torch.Tensor) else 0 for a in args]
        # weakly: the call may free an input after its last use (``run_boxed``)
        versions = {
            i: (weakref.ref(a), _version(a))
            for i, a in enumerate(args)
            if isinstance(a, torch.Tensor)
        }
        _clear_cublas_workspaces()
        try:
            outputs = self.runner.run_boxed(args)
        finally:
            _clear_cublas_workspaces()
        self.mutated = set()
        for i, (ref, version) in versions.items():
            arg = ref()
            if arg is not None and _version(arg) != version:  # a freed input was not written
                self.mutated.add(i)
        return outputs

    def _static_input_moved(self, args: Sequence[Any]) -> bool:
        moved = {
            i
            for i, (arg, address) in enumerate(zip(args, self.addresses))
            if isinstance(arg, torch.Tensor) and i not in self.copied and arg.data_ptr() != address
        }
        if moved:
            log.info("cudagraphs: inputs %s moved; copying them from now on", sorted(moved))
            self.copied |= moved
        return bool(moved)

    def _record(self, args: Sequence[Any], release_saved: bool) -> None:
        assert self.warm_addresses is not None
        if self.graph is not None:
            self.pool.overwrite_from(self.order)  # its outputs' memory goes back to the pool
        # A backward recorded again reads the saved values its first recording freed (the
        # forward's replays still write them there): in the same pool, its allocations
        # could land on them before it reads them.
        fresh = self.graph is not None and self.frees_saved
        self.graph = None
        self.expected = None
        model, kind = self.runner.model, self.runner.kind
        self.pool = pool = model.pool_for(self.device.index, kind, fresh=fresh)
        sources = {
            i: model.source_of(self.device.index, arg)
            for i, arg in enumerate(args)
            if isinstance(arg, torch.Tensor)
        }
        self.copied |= {
            i
            for i, source in sources.items()
            if args[i].data_ptr() != self.warm_addresses[i] and source is None
        }
        # clone: dense strides kept, overlapping ones made contiguous
        self.buffers = {i: args[i].detach().clone() for i in self.copied}
        inputs = [self.buffers.get(i, arg) for i, arg in enumerate(args)]
        released = set()
        if kind == "backward" and release_saved:
            for i, source in sources.items():
                recording = source[1].recording() if source is not None else None
                if recording is not None and source[0] is pool:
                    inputs[i] = recording.release(source[1], inputs[i])
                    if inputs[i] is not args[i]:
                        released.add(i)
        self.addresses = [a.data_ptr() if isinstance(a, torch.Tensor) else 0 for a in inputs]
        # a released input may be freed during the call and its address taken by an output
        input_storages = {
            t.untyped_storage().data_ptr(): (i, t.stride(), t.storage_offset())
            for i, t in enumerate(inputs)
            if isinstance(t, torch.Tensor) and i not in released
        }
        graph = torch.cuda.CUDAGraph()
        generator = torch.cuda.default_generators[self.device.index]
        rng_before = generator.clone_state()
        _clear_cublas_workspaces()
        try:
            with (
                torch.cuda.device(self.device),
                torch.cuda.graph(graph, pool=pool.handle, capture_error_mode="thread_local"),
            ):
                # boxed: the released saved values are freed, their blocks reused, as it goes
                outputs = self.runner.run_boxed(inputs)
        except Exception as e:
            # A failed recording leaves the CUDA generator marked as capturing, and every
            # later random op would fail: give it back its state from before the recording.
            generator.graphsafe_set_state(rng_before)
            self.eager_reason = f"recording failed ({type(e).__name__}: {e})"
            return
        finally:
            _clear_cublas_workspaces()
        self.static_outputs, self.outputs_spec = pytree.tree_flatten(outputs)
        self.released = set()
        self._find_input_aliases(args, input_storages)
        self.reuses = pool.reused_released()
        self.frees_saved = self.frees_saved or bool(self.reuses)
        self.graph = graph
        self.order = pool.new_order(graph)
        log.info(
            "cudagraphs: recorded a %s graph after %d warm-up(s); inputs copied on each call: %s",
            kind, self.warm_ups, sorted(self.copied) or "none",
        )  # fmt: skip

    def release(self, handed_out: Any, alias: torch.Tensor) -> torch.Tensor:
        """The static output ``alias`` is (handed out as ``handed_out``), for a backward's
        recording to free: this graph keeps an alias of it. ``alias`` itself where the
        output is not this recording's own or shares its memory with another output."""
        k = handed_out.index
        static = self.static_outputs[k] if handed_out.order == self.order else None
        if (
            not isinstance(static, torch.Tensor)
            or k in self.released
            or k in self.input_views
            or self.runner.kind != "forward"
        ):
            return alias
        ptr = static.untyped_storage().data_ptr()
        if any(
            j != k
            and j not in self.input_views
            and isinstance(t, torch.Tensor)
            and t.untyped_storage().data_ptr() == ptr
            for j, t in enumerate(self.static_outputs)
        ):
            return alias
        self.static_outputs[k] = alias_of(static)
        self.released.add(k)
        handed_out.message += OVERWRITTEN_SAVED
        self.pool.release(self, k, static)
        return static

    def _find_input_aliases(self, args: Sequence[Any], input_storages: dict) -> None:
        """Outputs that alias inputs stay aliases of the caller's tensors, as in eager.

        A copied input's buffer has the caller's strides unless the caller's tensor
        overlaps itself; views of such a buffer are handed out like other outputs.
        ``input_storages``: each tensor input's storage address -> (position, strides, offset).
        """
        self.input_views = {}
        for k, out in enumerate(self.static_outputs):
            if not isinstance(out, torch.Tensor):
                continue
            found = input_storages.get(out.untyped_storage().data_ptr())
            if found is not None and args[found[0]].stride() == found[1]:
                self.input_views[k] = (found[0], out.storage_offset() - found[2])
                # its layout alone: the tensor is the caller's (an output of another graph,
                # say), which this recording must neither keep alive nor read once poisoned
                self.static_outputs[k] = torch.empty_strided(
                    out.shape, out.stride(), dtype=out.dtype, device="meta"
                )

    def _replay(self, args: Sequence[Any]) -> Any:
        assert self.graph is not None and self.outputs_spec is not None
        for i, buffer in self.buffers.items():
            buffer.copy_(args[i])
        self.graph.replay()
        # poisoned after the launch (the host's work overlaps the GPU's), before the call
        # returns and before this replay's own outputs are handed out
        self.pool.overwrite_from(self.order)
        self.pool.overwrite_released(self.reuses)
        for i in self.mutated & self.copied:
            args[i].copy_(self.buffers[i])
        message = OVERWRITTEN + (OVERWRITTEN_GRAD if self.runner.kind == "backward" else "")
        outputs = []
        for k, out in enumerate(self.static_outputs):
            if not isinstance(out, torch.Tensor):
                outputs.append(out)
            elif k in self.input_views:
                i, offset = self.input_views[k]
                base = args[i]
                outputs.append(
                    base.as_strided(out.shape, out.stride(), base.storage_offset() + offset)
                )
            else:
                saved = OVERWRITTEN_SAVED if k in self.released else ""
                outputs.append(self.pool.hand_out(self.order, out, self, k, message + saved))
        return pytree.tree_unflatten(outputs, self.outputs_spec)


class _Expected:
    """A recording's arguments as ``Recording.accepts`` compares them: the layouts (shape,
    strides, dtype, device) of its tensor inputs and the addresses of those it reads in
    place, and its non-tensor values: what ``signature`` and ``_static_input_moved`` would
    find. The tensors are checked in one C++ call (``tensors_check``: a model's parameters
    are most of a call's inputs, and reading their addresses and shapes in Python was most
    of what a replay did before it launched: 67 of tv_resnet50's 200 us on the H200); in
    Python where the C++ module is not built."""

    def __init__(self, args: Sequence[Any], copied: set[int], addresses: list[int]):
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        static = [i for i in tensors if i not in copied]
        others = [i for i in range(len(args)) if i not in set(tensors)]
        self.count = len(args)
        self.tensors, self.static, self.others = map(_picker, (tensors, static, others))
        self.addresses = [addresses[i] for i in static]
        self.layouts = [_layout(t) for t in self.tensors(args)]
        self.values = list(self.others(args))
        self.native = tensors_check(
            [(i, _spec(args[i]), addresses[i] if i not in copied else None) for i in tensors]
        )

    def matches(self, args: Sequence[Any]) -> bool:
        if len(args) != self.count:
            return False
        others = self.others(args)
        same_types = [type(v) for v in others] == [type(v) for v in self.values]
        if not same_types or list(others) != self.values:  # 1 == 1.0 == True: types first
            return False
        if self.native is not None and isinstance(args, list):
            return self.native(args)
        try:
            moved = [t.data_ptr() for t in self.static(args)] != self.addresses
            return not moved and [_layout(t) for t in self.tensors(args)] == self.layouts
        except (AttributeError, RuntimeError):  # not a tensor, or a poisoned one: the slow path
            return False


def _spec(t: torch.Tensor) -> tuple:
    """``t``'s layout as ``tensors_check`` compares it."""
    return (t.dtype, t.device, t.requires_grad, tuple(t.shape), tuple(t.stride()))


def _layout(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.device)


def _picker(positions: list[int]) -> Callable[[Sequence[Any]], tuple]:
    """The items of a sequence at ``positions``, as a tuple."""
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        position = positions[0]
        return lambda args: (args[position],)
    return lambda args: ()
