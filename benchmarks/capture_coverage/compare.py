"""Structural comparison of a compiled program's results with eager's.

Tensors go through ``torch.testing.assert_close`` (values, dtype, device);
containers must have the same type (by name) and layout; user objects are compared by
their attributes; reprs that embed a memory address are compared without it.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def assert_same(expected: Any, actual: Any, path: str = "result") -> None:
    """Raise ``AssertionError`` naming the first place where ``actual`` differs."""
    if _type_key(expected) != _type_key(actual):
        raise AssertionError(
            f"{path}: type {type(actual).__name__}, eager gives {type(expected).__name__}"
        )
    if isinstance(expected, torch.Tensor):
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError as e:
            raise AssertionError(f"{path}: {e}") from None
    elif isinstance(expected, np.ndarray | np.generic):
        np.testing.assert_allclose(actual, expected, err_msg=path, equal_nan=True)
    elif isinstance(expected, Mapping):
        _same_sequence(list(expected), list(actual), f"{path}.keys()")
        for i, key in enumerate(expected):
            assert_same(expected[key], actual[list(actual)[i]], f"{path}[{key!r}]")
    elif isinstance(expected, tuple | list | collections.deque):
        _same_sequence(list(expected), list(actual), path)
    elif isinstance(expected, set | frozenset):
        if len(expected) != len(actual):
            raise AssertionError(f"{path}: {len(actual)} items, eager gives {len(expected)}")
    elif isinstance(expected, float):
        both_nan = math.isnan(expected) and math.isnan(actual)
        if not (both_nan or math.isclose(expected, actual, rel_tol=1e-6)):
            raise AssertionError(f"{path}: {actual!r}, eager gives {expected!r}")
    elif isinstance(expected, str):
        if _ADDRESS.sub("", expected) != _ADDRESS.sub("", actual):
            raise AssertionError(f"{path}: {actual!r}, eager gives {expected!r}")
    elif _has_state(expected):
        assert_same(_state(expected), _state(actual), f"{path}.__dict__")
    elif expected != actual:
        raise AssertionError(f"{path}: {actual!r}, eager gives {expected!r}")


def _type_key(value: Any) -> str:
    """A type by name: a class made inside the program (a namedtuple) is a new object per
    call, and torch.compile gives it another ``__module__``."""
    return type(value).__qualname__


def _same_sequence(expected: list[Any], actual: list[Any], path: str) -> None:
    if len(expected) != len(actual):
        raise AssertionError(f"{path}: {len(actual)} items, eager gives {len(expected)}")
    for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
        assert_same(e, a, f"{path}[{i}]")


def _has_state(value: Any) -> bool:
    """A user object (dataclass or plain class instance) whose attributes say what it is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return True
    return hasattr(value, "__dict__") and type(value).__module__ not in ("builtins", "torch")


def _state(value: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return dict(vars(value))
