"""Which Python function capture translates for a compile target.

Capture translates Python frames. A target that has one of its own (a function, a
bound method, an object whose class defines ``__call__`` in Python) is translated
itself. Any other callable (``torch.sin``, ``abs``, ``functools.partial``, a
``torch.jit.script`` function, a class, a method of a C object) is called from a
small Python frame that capture translates instead, as torch.compile does: the call
is traced where capture knows the callee, and breaks the graph (runs natively, the
reason logged) where it does not. No callable is refused.
"""

from __future__ import annotations

import inspect
import itertools
import re
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from torchkiln.compiled_module import call_override


def frame_function(target: Callable) -> tuple[Any, types.FunctionType]:
    """``(bound_self, function)``: the function whose frames are captured, and the object
    its first parameter is bound to (None for a plain function)."""
    if isinstance(target, types.FunctionType):
        return None, target
    if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
        return target.__self__, target.__func__
    if not isinstance(target, type):
        call = _class_call(target)
        if isinstance(call, types.FunctionType):
            return target, call
    return None, call_through(target)


def _class_call(target: Any) -> Any:
    """What calling ``target`` runs, read from its class: a module's ``forward`` unless its
    class overrides ``nn.Module.__call__`` (then, as for any object, ``__call__``)."""
    if isinstance(target, torch.nn.Module) and call_override(target) is None:
        return inspect.getattr_static(type(target), "forward", None)
    return inspect.getattr_static(type(target), "__call__", None)


_serial = itertools.count()
_NON_WORD = re.compile(r"\W")


def call_through(target: Callable) -> types.FunctionType:
    """A Python function that calls ``target``: a frame for capture to translate.

    Each gets a code object of its own, named after ``target``: captures are cached per
    code object (and ``cache_size_limit`` counted per code object), and the name is what
    logs and errors show.
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    name = getattr(target, "__name__", None) or type(target).__name__
    name = f"call_{_NON_WORD.sub('_', name)}_{next(_serial)}"
    call.__code__ = call.__code__.replace(co_name=name, co_qualname=name)
    call.__name__ = call.__qualname__ = name
    return call


def is_stdlib(module: str | None) -> bool:
    """Standard-library code is called, not traced (``logging``, ``time``...)."""
    return bool(module) and module.partition(".")[0] in sys.stdlib_module_names
