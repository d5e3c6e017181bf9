"""Small helpers the transformed code calls at run time."""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from torchkiln.capture.guards import AUTOCAST_DEVICES


class GradModeRestore:
    """The ``__exit__`` of a grad-mode ``with`` block that a graph break left open.

    A resume function receives it on its stack where the original frame had
    ``torch.no_grad().__exit__``; calling it restores the grad mode that was
    active before the block, as the original ``__exit__`` would.
    """

    __slots__ = ("prev",)

    def __init__(self, prev: bool):
        self.prev = prev

    def __call__(self, *exc_info: Any) -> bool:
        torch._C._set_grad_enabled(self.prev)
        return False


def autocast_snapshot() -> tuple:
    """Autocast as plain values a guard or graph argument can print: the cache flag, then
    ``(device, enabled, dtype name)`` for every device type (``set_autocast`` puts it back)."""
    devices = tuple(
        (d, torch.is_autocast_enabled(d), str(torch.get_autocast_dtype(d)).removeprefix("torch."))
        for d in AUTOCAST_DEVICES
    )
    return (torch.is_autocast_cache_enabled(), devices)


def set_autocast(state: tuple) -> None:
    """Switch autocast to ``state`` (an ``autocast_snapshot``): a ``torch.autocast`` region the
    compiled frame enters or leaves, as a graph node and after a graph break."""
    cache, devices = state
    for device, enabled, dtype in devices:
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, getattr(torch, dtype))
    torch.set_autocast_cache_enabled(cache)
    if not any(enabled for _, enabled, _ in devices):
        torch.clear_autocast_cache()  # as leaving the outermost ``torch.autocast`` does


class AutocastRestore:
    """The ``__exit__`` of a ``torch.autocast`` block that a graph break left open (as
    ``GradModeRestore``): calling it puts back the autocast state from before the block."""

    __slots__ = ("prev",)

    def __init__(self, prev: tuple):
        self.prev = prev

    def __call__(self, *exc_info: Any) -> bool:
        set_autocast(self.prev)
        return False


def make_object(cls: type, attrs: dict) -> Any:
    """An instance the compiled frame created: allocated without ``__init__`` (and without a
    ``__new__`` of the class's own, which may need arguments: the nearest C one allocates),
    attributes set."""
    allocate = next(
        k.__dict__["__new__"]
        for k in cls.__mro__
        if not isinstance(k.__dict__.get("__new__", staticmethod(None)), staticmethod)
    )
    obj = allocate(cls)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


def make_dict_object(cls: type, attrs: dict, setitem: Any, items: dict) -> Any:
    """A dict-subclass instance the compiled frame created: its items are stored with the C
    ``setitem`` (the class's own ``__setitem__`` may refuse or do more), then its attributes."""
    obj = make_object(cls, attrs)
    for key, value in items.items():
        setitem(obj, key, value)
    return obj


def iterator_at(iterable: Iterable, index: int) -> Iterator:
    """``iter(iterable)`` advanced by ``index`` items: an iterator the compiled frame had started."""
    iterator = iter(iterable)
    for _ in range(index):
        next(iterator)
    return iterator


def make_function(
    code: types.CodeType, globals_: dict, defaults: tuple, kwdefaults: dict, closure: tuple
) -> types.FunctionType:
    """A function the compiled frame created (``MAKE_FUNCTION``), built again after the graph."""
    fn = types.FunctionType(code, globals_, code.co_name, defaults or None, closure or None)
    fn.__kwdefaults__ = kwdefaults or None
    return fn


def set_entries(s: set | frozenset) -> tuple:
    """A set's elements with their types, in its iteration order (what a set argument's guard
    compares: ``{1} == {True}``, yet they print differently)."""
    return tuple((type(v), v) for v in s)
