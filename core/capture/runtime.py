"""Small helpers the transformed code calls at run time."""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from typing import Any

import torch


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
