"""Fake-tensor propagation of the torch operations a translation captures, and its replay.

``FakePropagation.run`` runs one operation on fake tensors to learn its
result's metadata; it is most of a translation's time. A frame that breaks
is translated twice with the same arguments, and nothing runs in between
(``graph_break``): the second pass performs the first pass's operations
again, in the same order, up to the break. So the second pass shares the
first pass's ``FakeTensorMode`` (its inputs get the same fake tensors from
the mode's memo) and takes each operation's result from the first pass,
as long as the operation, its arguments (fake tensors by identity, constants
by value) and grad mode are the same; the first difference ends the replay.

The first pass is not replayed if one of its operations changed the
metadata of a fake tensor it was given (``unsqueeze_``, ``set_``...): its
fake tensors would no longer describe the point where the second pass
reads them. Changing values in place (``add_``, ``x[i] = y``) is fine:
fake tensors have no values (except the constants fake mode keeps for small
tensors made at capture time, which count as metadata here).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode

from torchkiln.capture import dynamic
from torchkiln.capture.guards import autocast_state
from torchkiln.capture.variables.constants import is_constant_value

_NO_REPLAY: tuple = ()


class FakePropagation:
    """One translation's fake mode and operation results; ``previous`` is the pass to replay."""

    def __init__(self, previous: FakePropagation | None = None):
        replay = previous is not None and previous.replayable
        self.mode = previous.mode if replay else _new_mode()
        self.results: list[tuple[tuple, Any]] = []
        self.replayable = True
        self._replay: list | tuple = previous.results if replay else _NO_REPLAY

    def from_tensor(self, value: torch.Tensor, source: str | None = None) -> torch.Tensor:
        """The fake tensor of a real graph input (the same one for the same tensor), with the
        sizes the capture's ``dynamic`` policy makes symbolic for an input read through
        ``source`` (SymInts of the mode's ShapeEnv, created on first need: it costs a second
        to import)."""
        dims = dynamic.current().dynamic_dims(source, value) if source else None
        if not dims:
            return self.mode.from_tensor(value, static_shapes=True)
        from torchkiln.capture.symbolic import symbolic_fake

        return symbolic_fake(self.mode, value, source, dims)

    def run(self, kind: str, target: Any, args: list, kwargs: dict) -> Any:
        """``target`` (a ``call_method`` name or a callable) applied to fake ``args``."""
        key = (kind, target, args, kwargs, torch.is_grad_enabled(), _inference(), _autocast())
        index = len(self.results)
        if index < len(self._replay) and _same(self._replay[index][0], key):
            self.results.append(self._replay[index])
            return self._replay[index][1]
        self._replay = _NO_REPLAY
        before = _metadata(args, kwargs)
        try:
            with self.mode, symbolic_dispatch(self.mode):
                if kind == "call_method":
                    result = getattr(args[0], target)(*args[1:], **kwargs)
                else:
                    result = target(*args, **kwargs)
            if self.mode.shape_env is not None:
                _bind_unbacked(self.mode.shape_env, result)
        finally:
            self.replayable &= _metadata(args, kwargs) == before
        self.results.append((key, result))
        return result


def _bind_unbacked(shape_env: Any, result: Any) -> None:
    """Take the unbacked sizes an op just made (``nonzero``'s count) as bound by its result,
    as torch's tracers do after each op: the ShapeEnv requires that of every new one."""
    from torch.fx.experimental.symbolic_shapes import compute_unbacked_bindings

    compute_unbacked_bindings(shape_env, result)


def _new_mode() -> FakeTensorMode:
    """A fake mode for one capture; with a ShapeEnv from the start where the capture keeps
    ops with data-dependent output sizes (their sizes are unbacked symbols of it)."""
    if dynamic.current().data_dependent_break is not None:
        return FakeTensorMode()
    from torchkiln.capture.symbolic import unbacked_mode

    return unbacked_mode()


def symbolic_dispatch(mode: FakeTensorMode) -> Any:
    """With symbolic sizes, composite ops decompose in Python, as torch.compile's tracer does:
    some C++ kernels read ``numel()`` where they should read ``sym_numel()`` (``linear`` on a
    3-D input fails so in torch 2.11)."""
    return enable_python_dispatcher() if mode.shape_env is not None else contextlib.nullcontext()


def _inference() -> bool:
    """Whether ops make inference tensors (``torch.inference_mode`` regions in the frame)."""
    return torch.is_inference_mode_enabled()


def _autocast() -> tuple | None:
    """The autocast state an op's fake result depends on (None, the common case: all off)."""
    return autocast_state() if torch._C._is_any_autocast_enabled() else None


def _metadata(args: list, kwargs: dict) -> list[tuple]:
    """What later fake propagation reads of the tensors among the arguments."""
    found: list[tuple] = []
    _collect_metadata((args, kwargs), found)
    return found


def _collect_metadata(value: Any, found: list[tuple]) -> None:
    if isinstance(value, torch.Tensor):
        found.append(_tensor_metadata(value))
    elif isinstance(value, (tuple, list)):
        for item in value:
            _collect_metadata(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _collect_metadata(item, found)


def _tensor_metadata(t: torch.Tensor) -> tuple:
    """Layout, storage and autograd facts; whether a fake tensor still holds a known constant
    (fake mode forgets it when the value changes in place)."""
    common = (t.layout, t.shape, t.dtype, t.requires_grad, getattr(t, "constant", None) is None)
    if t.layout is not torch.strided:
        return common
    return (*common, t.stride(), t.storage_offset(), t.untyped_storage()._cdata)


def _same(a: Any, b: Any) -> bool:
    """Whether two operation keys match: constants by type and value, anything else by identity."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, slice):
        return _same((a.start, a.stop, a.step), (b.start, b.stop, b.step))
    return is_constant_value(a) and bool(a == b)
