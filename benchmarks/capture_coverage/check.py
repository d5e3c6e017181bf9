"""Runs one program eagerly, under torch.compile and under torchkiln, and classifies the outcome.

Each way calls the program twice (a second call catches what only a cached
capture gets wrong), on inputs built from the same seeds, so a compiled run
sees fresh tensors equal to eager's. Both compilers run with ``fullgraph=True``
and an eager-equivalent backend that counts graphs.

Statuses (``STATUSES``): the program does not count when eager raises
(``eager-error``), when torch.compile does not capture it in one graph
(``not-captured-by-torch``) or gets it wrong itself (``torch-wrong``). It
counts, with torchkiln's outcome: ``captured-correct``, ``graph-break``
(``Unsupported``, with its reason), ``wrong-result`` (outputs or mutated inputs
differ from eager), ``translator-crash`` (any other exception), ``timeout``.
"""

from __future__ import annotations

import random
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import torchkiln
from benchmarks.caches import reset_compilers
from benchmarks.capture_coverage.compare import assert_same
from benchmarks.capture_coverage.corpus import Program
from benchmarks.measure import RowTimeout

#: Outcomes that count: torch.compile captured the program in one graph, correctly.
COUNTED = ("captured-correct", "graph-break", "wrong-result", "translator-crash", "timeout")
EXCLUDED = ("eager-error", "not-captured-by-torch", "torch-wrong")
STATUSES = COUNTED + EXCLUDED
CALLS = 2
KILN_DIR = str(Path(torchkiln.__file__).parent)


class GraphCounter:
    """An eager backend (runs the graph as captured) that counts the graphs it is given."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        self.graphs += 1
        return gm.forward


def check(program: Program) -> dict[str, Any]:
    """The outcome of ``program`` as a JSON-able record with a ``status`` from ``STATUSES``."""
    seed = zlib.crc32(program.name.encode())
    phase = "eager"
    try:
        expected, error = _attempt(lambda: _calls(program, program.fn, seed))
        if error:
            return {"status": "eager-error", "error": _describe(error)}

        phase = "torch.compile"
        torch_graphs = GraphCounter()
        compiled = torch.compile(program.fn, backend=torch_graphs, fullgraph=True)
        reference, error = _attempt(lambda: _calls(program, compiled, seed))
        if error:
            return {"status": "not-captured-by-torch", "error": _describe(error)}
        if mismatch := _mismatch(expected, reference):
            return {"status": "torch-wrong", "error": mismatch}

        phase = "torchkiln"
        kiln_graphs = GraphCounter()
        compiled = torchkiln.compile(program.fn, backend=kiln_graphs, fullgraph=True)
        got, error = _attempt(lambda: _calls(program, compiled, seed))
    except RowTimeout as e:
        return {"status": "timeout", "phase": phase, "error": str(e)}
    finally:
        reset_compilers()
    graphs = {"torch_graphs": torch_graphs.graphs, "kiln_graphs": kiln_graphs.graphs}
    if isinstance(error, torchkiln.exc.Unsupported):
        return {"status": "graph-break", "reason": error.reason, "location": error.location}
    if error:
        return {"status": "translator-crash", "error": _describe(error), **_where(error)}
    if mismatch := _mismatch(expected, got):
        return {"status": "wrong-result", "error": mismatch, **graphs}
    return {"status": "captured-correct", **graphs}


def _calls(program: Program, fn: Callable[..., Any], seed: int) -> list[tuple[Any, tuple]]:
    """``(output, inputs after the call)`` of each call, every random source seeded alike."""
    results = []
    for call in range(CALLS):
        torch.manual_seed(seed + call)
        random.seed(seed + call)
        np.random.seed((seed + call) % 2**32)
        args = program.make_inputs()
        results.append((fn(*args), args))
    return results


def _attempt(run: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``(run(), None)``, or ``(None, the exception)``; the hang guard's ``RowTimeout`` goes through."""
    try:
        return run(), None
    except RowTimeout:
        raise
    except Exception as e:
        return None, e


def _mismatch(expected: list[tuple[Any, tuple]], actual: list[tuple[Any, tuple]]) -> str | None:
    for call, ((out, args), (got_out, got_args)) in enumerate(zip(expected, actual, strict=True)):
        try:
            assert_same(out, got_out, f"call {call}: output")
            assert_same(args, got_args, f"call {call}: inputs after the call")
        except AssertionError as e:
            return str(e)[:2000]
    return None


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error)[:2000]}"


def _where(error: BaseException) -> dict[str, str]:
    """The innermost torchkiln frame of the traceback, and the innermost frame of all.

    A ``CaptureError`` wraps the error that went wrong inside the translator: look there.
    """
    while error.__cause__ is not None:
        error = error.__cause__
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f.filename.startswith(KILN_DIR)]
    where = {"raised_at": _frame(frames[-1])} if frames else {}
    if ours:
        where["torchkiln_frame"] = _frame(ours[-1])
    return where


def _frame(frame: traceback.FrameSummary) -> str:
    return f"{frame.filename}:{frame.lineno} in {frame.name}"
