"""The programs the capture-coverage benchmark runs, one module per source.

A program is a plain function of tensors. Its inputs are built the way
PyTorch's dynamo tests build them (``make_test``: one ``torch.randn(10, 10)``
per parameter) unless it names its own with :func:`program`. Add a source by
adding a module to this package whose functions carry one of the two
decorators; :func:`load_corpus` imports every module here.

Modules named ``pytorch_*.py`` hold programs read from PyTorch's own tests
(BSD-3-Clause, attributed in each module); they are kept out of git (see
``.gitignore`` here), so the runner works with whatever sources are present.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

InputMaker = Callable[[], tuple[Any, ...]]


@dataclass(frozen=True)
class Program:
    """One test program: ``fn(*make_inputs())`` is what gets compiled and compared."""

    name: str
    fn: Callable[..., Any]
    make_inputs: InputMaker
    source: str


_PROGRAMS: dict[str, Program] = {}


def program(make_inputs: InputMaker) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as a program called with ``make_inputs()``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        module = fn.__module__.rsplit(".", 1)[-1]
        name = f"{module}.{fn.__name__}"
        if name in _PROGRAMS:
            raise ValueError(f"corpus program {name!r} is defined twice: rename one of them")
        source = getattr(inspect.getmodule(fn), "SOURCE", module)
        _PROGRAMS[name] = Program(name, fn, make_inputs, source)
        return fn

    return register


def make_test(fn: Callable[..., Any] | None = None, expected_frame_count: int = 1) -> Any:
    """PyTorch's ``make_test`` (test/dynamo/test_functions.py): one ``randn(10, 10)`` per parameter.

    ``expected_frame_count`` is accepted so programs keep their decorator as
    written; whether torch.compile captures a program is measured, not assumed.
    """
    if fn is None:
        return lambda f: make_test(f, expected_frame_count)
    nargs = len(inspect.signature(fn).parameters)
    return program(lambda: tuple(torch.randn(10, 10) for _ in range(nargs)))(fn)


def load_corpus() -> dict[str, Program]:
    """Every program of every module in this package, by name, in definition order."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return dict(_PROGRAMS)
