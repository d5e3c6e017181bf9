"""The ``ops`` namespace that IR bodies are written against, and its current handler.

An IR node's body is a Python function of its index that calls ``ops.add``,
``ops.load``, ``ops.exp`` ... Which object answers those calls is chosen by
whoever runs the body: the C++ code generator emits C++ text, the dependency
collector records loads, a future Triton generator would emit Triton. So one
IR serves every code generator. :class:`~.codegen.cpp.CppOpsHandler` is the
reference for the op set (math ops plus ``load``, ``constant``,
``index_expr``, ``to_dtype``, ``indirect_indexing``, ``masked``, ``where``,
``rand``, ``randn``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_state = threading.local()


class _Ops:
    """Forwards ``ops.<name>(...)`` to the handler installed by :func:`set_ops_handler`."""

    def __getattr__(self, name: str) -> Any:
        def forward(*args: Any, **kwargs: Any) -> Any:
            handler = getattr(_state, "handler", None)
            if handler is None:
                raise RuntimeError(f"ops.{name} was called outside of any ops handler")
            return getattr(handler, name)(*args, **kwargs)

        forward.__name__ = name
        return forward


ops = _Ops()


@contextlib.contextmanager
def set_ops_handler(handler: object) -> Iterator[None]:
    previous = getattr(_state, "handler", None)
    _state.handler = handler
    try:
        yield
    finally:
        _state.handler = previous
