"""Guard-soundness fuzz (issue #14): every compiled call gives eager's answer or recompiles.

Each target of ``fuzz_targets.py`` (functions, closures, globals, defaults,
modules, global torch state, aliasing, Python semantics) is compiled with a
backend and called again and again while ``fuzz_targets.mutate`` changes
things between calls: shapes, dtypes, ``requires_grad``, grad mode,
autocast, inference mode, default dtype, deterministic algorithms, module
attributes (set on the compiled object, as users do), defaults, globals,
closure cells, hooks, aliasing between inputs, the memory layout of inputs
(at a storage offset, strided, permuted, channels_last, expanded), config,
and calls from several threads at once. Every call is compared with an eager
twin given equal inputs, laid out alike: outputs (values and strides), inputs
after the call (values, strides, and the whole storage each one views), which
outputs alias which inputs, globals or module state written, and gradients.
An exception only the compiled side raises is a crash.

CI runs a fixed seed (about 1,050 calls, inductor on a subset of targets; and 200 calls
compiled with ``dynamic=True`` on the eager backend).
Environment variables run more:

    TORCHKILN_FUZZ_CALLS=10000   calls in all, shared between the backends
    TORCHKILN_FUZZ_SEED=7        another seed
    TORCHKILN_FUZZ_DYNAMIC=true  compile with dynamic=True (none: the default, false)

Every mode also marks inputs now and then (``torchkiln.mark_dynamic`` with bounds,
``maybe_mark_dynamic``, ``mark_static``); CI runs ``dynamic=True`` on the eager backend too,
where symbolic guards (``s0 >= 2``, ``s0 > 4``, sizes of two inputs equal) decide reuse.

As a script it prints a table (calls, wrong results, crashes, compiles,
recompiles per backend) and every finding::

    python tests/core/soundness/test_guard_fuzz.py --calls 10000 --seed 3
    python tests/core/soundness/test_guard_fuzz.py --backend eager --target global_reader
    python tests/core/soundness/test_guard_fuzz.py --dynamic true --target "symbolic sizes"
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import dataclasses
import logging
import math
import os
import random
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from fuzz_targets import TARGETS, Env, Program, Target, apply_mark, mutate
from torch import nn

import torchkiln
from torchkiln.registry import backend_status, lookup_backend

BACKENDS = ("eager", "aot_eager", "inductor")
#: ``dynamic=`` of ``torchkiln.compile`` by name (``--dynamic``, ``TORCHKILN_FUZZ_DYNAMIC``).
DYNAMIC = {"none": None, "true": True, "false": False}
#: Calls of the CI run with ``dynamic=True`` (eager backend): about 15 s, run beside the inductor's.
CI_DYNAMIC_CALLS = 200
#: Calls of the backends that run graphs in another runtime (each compile converts and builds
#: a model: fewer), over the inductor's targets, at CI's call count.
OTHER_BACKENDS = {"onnxrt": 120, "openvino": 120, "tvm": 60}
#: Share of the calls each backend gets; inductor compiles C++ and runs on a subset of targets.
SHARE = {"eager": 0.45, "aot_eager": 0.33, "inductor": 0.22}
CI_CALLS = 1050
CI_SEED = 0
HISTORY_SHOWN = 6
EPOCH_PER_TARGET = 15  # calls per target between resets of every cache and program
#: Threads call different targets (each compiling its own) with this probability.
P_MIXED_THREADS = 0.3
THREAD_TIMEOUT = 120  # seconds: a thread still running then is reported as a deadlock


# ---------------------------------------------------------------------------
# Comparing a compiled call with its eager twin.


@dataclasses.dataclass
class Lazy:
    """An iterator or dict view, materialized right after the call (its type kept)."""

    type: type
    items: list


LAZY_TYPES = tuple(
    type(x)
    for x in (
        {}.keys(),
        {}.values(),
        {}.items(),
        map(abs, ()),
        filter(None, ()),
        zip(),
        iter([]),
        iter(()),
        enumerate(()),
        reversed([]),
        (i for i in ()),
    )
)


def materialize(value: Any) -> Any:
    if isinstance(value, LAZY_TYPES):
        return Lazy(type(value), [materialize(v) for v in value])
    if isinstance(value, list):
        return [materialize(v) for v in value]
    if isinstance(value, tuple) and any(isinstance(v, (LAZY_TYPES, list, tuple)) for v in value):
        items = [materialize(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Lazy):
        value = value.items
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}[{k!r}]")
    else:
        yield path, value


#: assert_close's default tolerances of the low-precision dtypes
LOW_PRECISION = {torch.bfloat16: 1.6e-2, torch.float16: 1e-3}
#: assert_close's default relative tolerance of float32
FLOAT32_RTOL = 1.3e-6
#: A gradient through low-precision ops is rounded in the forward and again in the backward.
GRAD_SLACK = 4.0

Tolerance = Callable[[torch.Tensor], dict]


def tolerance(
    autocast: torch.dtype | None,
    slack: float = 1.0,
    grads: bool = False,
    operand_scale: float = 0.0,
) -> Tolerance:
    """assert_close's defaults for the dtype, or the low-precision dtype's for a computation in it.

    A bfloat16 or float16 result (autocast, or such inputs) is off by its rounding relative to the
    operands rather than to each element (inductor rounds once where eager rounds after each op),
    so the absolute tolerance scales with the tensor's largest value (times ``slack``), or with
    the call's inputs' (``operand_scale``) where those are larger: a result that cancels its
    operands is small while eager's rounding of them is not (seed 139, ``plain_pointwise`` in
    bfloat16: ``relu(sin(x) + 2 * y)`` near 0; float64 0.00109, inductor 0.00109, eager 0.00195).
    ``grads``: float32 gradients are scaled so too: they are sums whose rounding follows their
    largest terms (NormNet's, through a batch norm's and a layer norm's backward, differed from
    float64's by 3.5e-5 in eager, at 84).
    """

    def of(expected: torch.Tensor) -> dict:
        low = LOW_PRECISION.get(expected.dtype) or LOW_PRECISION.get(autocast)
        rtol = low
        if rtol is None and grads and expected.dtype == torch.float32:
            rtol = FLOAT32_RTOL
        if rtol is None or not expected.is_floating_point():
            return {}
        scale = largest_value(expected)
        if low is not None:
            scale = max(scale, operand_scale)
        return {"rtol": rtol, "atol": max(1e-5, slack * rtol * scale)}

    return of


def largest_value(value: Any) -> float:
    """The largest finite magnitude among the floating tensors in ``value`` (0 for none)."""
    largest = 0.0
    for _, t in leaves(value, ""):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            m = t.detach().abs().max().item()
            largest = max(largest, m) if math.isfinite(m) else largest
    return largest


def tensor_differences(c: torch.Tensor, e: torch.Tensor, path: str, tol: Tolerance) -> list[str]:
    out = []
    for query in ("requires_grad", "is_inference"):
        got, want = getattr(c, query), getattr(e, query)
        got, want = (got(), want()) if callable(got) else (got, want)
        if got != want:
            out.append(f"{path}: {query} {got}, eager {want}")
    try:
        torch.testing.assert_close(c.detach(), e.detach(), equal_nan=True, **tol(e))
    except AssertionError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        out.append(f"{path}: {' '.join(lines)[:300]}")
    return out


def differences(c: Any, e: Any, path: str, tol: Tolerance) -> list[str]:
    """Where the compiled side's value ``c`` differs from eager's ``e`` (empty: equal)."""
    if type(c) is not type(e):
        return [f"{path}: type {type(c).__name__}, eager {type(e).__name__}"]
    if isinstance(e, torch.Tensor):
        return tensor_differences(c, e, path, tol)
    if isinstance(e, Lazy):
        if c.type is not e.type:
            return [f"{path}: type {c.type.__name__}, eager {e.type.__name__}"]
        return differences(c.items, e.items, path, tol)
    if isinstance(e, (list, tuple)):
        if len(c) != len(e):
            return [f"{path}: length {len(c)}, eager {len(e)}"]
        return [
            d for i, (a, b) in enumerate(zip(c, e)) for d in differences(a, b, f"{path}[{i}]", tol)
        ]
    if isinstance(e, dict):
        if list(c) != list(e):
            return [f"{path}: keys {list(c)}, eager {list(e)}"]
        return [d for k in e for d in differences(c[k], e[k], f"{path}[{k!r}]", tol)]
    if isinstance(e, float):
        same = (math.isnan(c) and math.isnan(e)) or (
            math.isclose(c, e, rel_tol=1.3e-6, abs_tol=1e-5)
            and math.copysign(1, c) == math.copysign(1, e)
        )
        return [] if same else [f"{path}: {c!r}, eager {e!r}"]
    if isinstance(e, nn.Module):
        return []
    if type(e).__eq__ is object.__eq__ and hasattr(e, "__dict__"):
        return differences(vars(c), vars(e), f"{path}.__dict__", tol)
    return [] if c == e else [f"{path}: {c!r}, eager {e!r}"]


def alias_relations(out: Any, args: tuple) -> set[str]:
    """Which outputs are, or share storage with, which inputs or earlier outputs."""
    seen = [(p, t) for p, t in leaves(args, "input") if isinstance(t, torch.Tensor) and t.numel()]
    found = set()
    for op, o in leaves(out, "output"):
        if not isinstance(o, torch.Tensor) or not o.numel():
            continue
        for ip, i in seen:
            if o is i:
                found.add(f"{op} is {ip}")
            elif o.untyped_storage().data_ptr() == i.untyped_storage().data_ptr():
                found.add(f"{op} shares storage with {ip}")
        seen.append((op, o))
    return found


def storage_of(t: torch.Tensor) -> torch.Tensor:
    """The whole storage ``t`` views, as a flat tensor of its dtype (elements outside the view too)."""
    return t.detach().as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


def significant_strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides of the dimensions longer than 1 (another dimension's stride moves no element)."""
    return tuple(stride for size, stride in zip(t.shape, t.stride()) if size > 1)


def layout_differences(c: Any, e: Any, path: str, tol: Tolerance, storages: bool) -> list[str]:
    """Where the tensors of ``c`` lie in memory otherwise than eager's ``e``.

    Strides are what a later ``view``, ``is_contiguous`` or kernel sees. With ``storages`` (the
    inputs after the call) the storage offset and the whole storage each tensor views are
    compared too: an input may view part of a larger storage, and a write that lands outside the
    view shows only there.
    """
    out = []
    for (p, a), (_, b) in zip(leaves(c, path), leaves(e, path)):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
            continue  # differences() reports the type or the shape
        if significant_strides(a) != significant_strides(b):
            out.append(f"{p}: strides {a.stride()}, eager {b.stride()}")
        elif storages and a.storage_offset() != b.storage_offset():
            out.append(f"{p}: storage offset {a.storage_offset()}, eager {b.storage_offset()}")
        elif storages:
            out += tensor_differences(storage_of(a), storage_of(b), f"{p} storage", tol)
    return out


def frozen(value: Any) -> Any:
    """A copy of state to compare later (tensors detached, requires_grad kept)."""
    if isinstance(value, torch.Tensor):
        clone = value.detach().clone()
        return clone.requires_grad_() if value.requires_grad else clone
    if isinstance(value, (list, tuple)):
        return type(value)(frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: frozen(v) for k, v in value.items()}
    return value


PLAIN = (bool, int, float, str, type(None), torch.Tensor)


def module_state(m: nn.Module) -> dict:
    """Parameters, buffers and plain public attributes (``training`` included) of every submodule."""
    state = {}
    for name, sub in m.named_modules():
        for key, value in vars(sub).items():
            if not key.startswith("_") and isinstance(value, PLAIN):
                state[f"{name}.{key}"] = frozen(value)
        for key, value in [*sub._parameters.items(), *sub._buffers.items()]:
            state[f"{name}.{key}"] = frozen(value)
    return state


def resync(prog: Program) -> None:
    """Give the compiled side eager's module state (compared already), so each call tests anew."""
    for (_, got), (_, want) in zip(prog.orig.named_modules(), prog.eager.named_modules()):
        for key, value in vars(want).items():
            if (
                not key.startswith("_")
                and isinstance(value, PLAIN)
                and not isinstance(value, torch.Tensor)
            ):
                got.__dict__[key] = value
        with torch.no_grad():
            for table in ("_parameters", "_buffers"):
                for key, value in getattr(want, table).items():
                    mine = getattr(got, table).get(key)
                    if mine is not None and value is not None and mine.shape == value.shape:
                        mine.copy_(value)


class GlobalState:
    """The globals, ``random`` state and torch RNG a function target writes: saved, read, restored."""

    def __init__(self, target: Target):
        self.names, self.uses_random = target.touched, target.uses_random
        self.module = sys.modules[Target.__module__]

    def save(self) -> tuple:
        """Each global's object and its contents: a tensor's values, a container's items (the same objects)."""
        saved = {}
        for name in self.names:
            obj = getattr(self.module, name)
            saved[name] = (
                obj,
                obj.detach().clone() if isinstance(obj, torch.Tensor) else copy.copy(obj),
            )
        return saved, random.getstate(), torch.get_rng_state()

    def restore(self, saved: tuple) -> None:
        values, py_rng, torch_rng = saved
        for name, (obj, contents) in values.items():
            setattr(self.module, name, obj)
            if isinstance(obj, torch.Tensor) and not torch.equal(obj, contents):
                with torch.no_grad():
                    obj.copy_(contents)
            elif isinstance(obj, list):
                obj[:] = contents
            elif isinstance(obj, dict):
                obj.clear()
                obj.update(contents)
        random.setstate(py_rng)
        torch.set_rng_state(torch_rng)

    def read(self) -> dict:
        state = {n: frozen(getattr(self.module, n)) for n in self.names}
        if self.uses_random:
            state["random.getstate()"] = random.getstate()
        return state


@dataclasses.dataclass
class Side:
    """What one side, compiled or eager, of a call produced."""

    args: tuple
    out: Any = None
    error: BaseException | None = None
    state: Any = None
    grads: dict | None = None
    grad_error: BaseException | None = None


def call_side(prog: Program, obj: Any, args: tuple, env: Env) -> Side:
    side = Side(args)
    with env.thread_local():
        try:
            side.out = materialize(prog.target.call(obj, args))
        except Exception as e:
            side.error = e
    return side


def cotangent(t: torch.Tensor, seed: int, index: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 31 + index)
    return torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.dtype)


def backward(side: Side, module: nn.Module | None, seed: int, accumulate: bool) -> None:
    """Gradients of a fixed random projection of the outputs, for input leaves and parameters."""
    outs = [t for _, t in leaves(side.out, "") if isinstance(t, torch.Tensor) and t.requires_grad]
    if side.error is not None or not outs:
        return
    wrt = [(p, t) for p, t in leaves(side.args, "input") if isinstance(t, torch.Tensor)]
    wrt = [(p, t) for p, t in wrt if t.requires_grad and t.is_leaf]
    if module is not None:
        wrt += [(f"param {n}", p) for n, p in module.named_parameters() if p.requires_grad]
    try:
        with torch.enable_grad():
            loss = sum((t * cotangent(t, seed, i)).sum() for i, t in enumerate(outs))
            if accumulate:
                loss.backward()
                side.grads = {p: t.grad for p, t in wrt}
            else:
                grads = torch.autograd.grad(loss, [t for _, t in wrt], allow_unused=True)
                side.grads = dict(zip([p for p, _ in wrt], grads))
    except Exception as e:
        side.grad_error = e


def describe(error: BaseException) -> str:
    first_line = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first_line[:200]}"


def compare(
    c: Side, e: Side, autocast: torch.dtype | None, slack: float = 1.0
) -> tuple[list[str], bool]:
    """The differences between the two sides, and whether the compiled side crashed;
    ``slack``: the target's ``low_precision_slack``."""
    if c.error or e.error:
        if e.error is None:
            return [f"compiled raised {describe(c.error)}"], True
        if c.error is None:
            return [f"eager raised {describe(e.error)}; compiled returned a value"], False
        if type(c.error) is not type(e.error):
            return [f"compiled raised {describe(c.error)}; eager raised {describe(e.error)}"], True
        return [], False
    tol = tolerance(autocast, slack, operand_scale=largest_value(e.args))
    diffs = differences(c.out, e.out, "output", tol)
    diffs += layout_differences(c.out, e.out, "output", tol, storages=False)
    diffs += differences(c.args, e.args, "input after the call", tol)
    diffs += layout_differences(c.args, e.args, "input after the call", tol, storages=True)
    alias_c, alias_e = alias_relations(c.out, c.args), alias_relations(e.out, e.args)
    if alias_c != alias_e:
        diffs.append(f"aliasing: compiled {sorted(alias_c)}, eager {sorted(alias_e)}")
    diffs += differences(c.state, e.state, "state", tol)
    if c.grad_error is not None and e.grad_error is None:
        return [*diffs, f"compiled backward raised {describe(c.grad_error)}"], True
    if e.grad_error is not None and c.grad_error is None:
        return [*diffs, f"eager backward raised {describe(e.grad_error)}; compiled did not"], False
    if (c.grads is None) != (e.grads is None):
        side = "compiled" if e.grads is None else "eager"
        return [
            *diffs,
            f"grad: only {side}'s outputs require grad (nothing to backward on the other)",
        ], False
    diffs += differences(
        c.grads, e.grads, "grad", tolerance(autocast, GRAD_SLACK * slack, grads=True)
    )
    return diffs, False


def params_owner(prog: Program, compiled_side: bool) -> nn.Module | None:
    if prog.orig is None:
        return None
    return prog.orig if compiled_side else prog.eager


def one_call(prog: Program, env: Env, seed: int) -> tuple[list[str], bool]:
    """One call of each side on equal inputs, then backward; returns (differences, crashed)."""
    make = prog.target.args
    args_c = make(
        prog.spec, torch.Generator().manual_seed(seed), prog.target.shapes[prog.spec.shape]
    )
    args_e = make(
        prog.spec, torch.Generator().manual_seed(seed), prog.target.shapes[prog.spec.shape]
    )
    marked = apply_mark(prog.spec.mark, args_c)  # eager's twin has no use for marks
    if marked:
        prog.history[-1] += f" | {marked}"
    for compiled_side in (True, False):
        for p in (params_owner(prog, compiled_side) or nn.Module()).parameters():
            p.grad = None
    globals_ = GlobalState(prog.target)
    saved = globals_.save()
    with env.process_wide():
        c = call_side(prog, prog.compiled, args_c, env)
        backward(c, params_owner(prog, True), seed, accumulate=True)  # before globals are restored
        c.state = globals_.read()
        globals_.restore(saved)
        e = call_side(prog, prog.eager, args_e, env)
        backward(e, params_owner(prog, False), seed, accumulate=True)
        e.state = globals_.read()
    if prog.orig is not None:
        c.state, e.state = module_state(prog.orig), module_state(prog.eager)
    return compare(c, e, env.autocast, prog.target.low_precision_slack)


def thread_calls(jobs: list[tuple[Program, int]], env: Env) -> list[tuple[list[str], bool]]:
    """``(program, seed)`` jobs called from one thread each, at once (compiled, then eager, in each).

    Gradients go through ``autograd.grad``: nothing accumulates into parameters shared by threads.
    """
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def worker(k: int) -> None:
        prog, seed = jobs[k]
        shape = prog.target.shapes[prog.spec.shape]
        try:
            args_c = prog.target.args(prog.spec, torch.Generator().manual_seed(seed), shape)
            args_e = prog.target.args(prog.spec, torch.Generator().manual_seed(seed), shape)
            apply_mark(prog.spec.mark, args_c)
            barrier.wait()
            c = call_side(prog, prog.compiled, args_c, env)
            e = call_side(prog, prog.eager, args_e, env)
            backward(c, params_owner(prog, True), seed, accumulate=False)
            backward(e, params_owner(prog, False), seed, accumulate=False)
            results[k] = compare(c, e, env.autocast, prog.target.low_precision_slack)
        except BaseException as error:  # a bug of the harness: raised in the main thread
            barrier.abort()
            results[k] = error

    with env.process_wide():
        workers = [
            threading.Thread(target=worker, args=(k,), daemon=True) for k in range(len(jobs))
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(THREAD_TIMEOUT)
            if w.is_alive():
                names = ", ".join(p.target.name for p, _ in jobs)
                raise RuntimeError(
                    f"deadlock: a thread calling {names} still runs after {THREAD_TIMEOUT} s"
                )
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


# ---------------------------------------------------------------------------
# The run.


@dataclasses.dataclass
class Finding:
    kind: str  # "wrong" or "crash"
    dynamic: str  # a key of DYNAMIC
    target: str
    category: str
    backend: str
    seed: int
    call: int
    threads: int  # 0: called from the main thread only
    history: list[str]
    details: list[str]

    def signature(self) -> tuple:
        first = (
            re.sub(r"[-+]?\d[\d.e+-]*", "N", self.details[0].split(":")[0]) if self.details else ""
        )
        return self.backend, self.dynamic, self.category, self.target, self.kind, first


@dataclasses.dataclass
class Report:
    backend: str
    seed: int
    dynamic: str = "none"  # a key of DYNAMIC
    calls: int = 0
    wrong: int = 0
    crashes: int = 0
    compiles: int = 0
    recompiles: int = 0
    eager_fallbacks: int = 0
    per_size: int = 0  # graphs with symbolic sizes a backend compiled once per size instead
    seconds: float = 0.0
    findings: list[Finding] = dataclasses.field(default_factory=list)


def backend_name(backend: Any) -> str:
    return (
        backend
        if isinstance(backend, str)
        else getattr(backend, "__name__", type(backend).__name__)
    )


def fuzz(
    backend: Any,
    calls: int,
    seed: int,
    only: tuple[str, ...] = (),
    quiet: bool = True,
    dynamic: str = "none",
) -> Report:
    """``calls`` calls of randomly chosen targets compiled with ``backend``; every difference from eager recorded.

    ``quiet`` silences the logs and warnings that would bury the findings; ``dynamic`` (a key of
    DYNAMIC) is passed to ``torchkiln.compile``. ``only`` names targets or categories.
    """
    name = backend_name(backend)
    if only:
        targets = [t for t in TARGETS if t.name in only or t.category in only]
        unknown = set(only) - {t.name for t in targets} - {t.category for t in targets}
        if unknown:
            raise ValueError(
                f"unknown targets {sorted(unknown)}; targets: {[t.name for t in TARGETS]}"
            )
    else:
        targets = [t for t in TARGETS if t.inductor or name != "inductor"]
    rng = random.Random(f"{seed}:{name}" + ("" if dynamic == "none" else f":{dynamic}"))
    report = Report(name, seed, dynamic)
    start = time.perf_counter()
    with quieted() if quiet else contextlib.nullcontext():
        try:
            while report.calls < calls:
                until = min(calls, report.calls + EPOCH_PER_TARGET * len(targets))
                Epoch(backend, targets, rng, report).run(until)
        finally:
            report.seconds = time.perf_counter() - start
    return report


@contextlib.contextmanager
def quieted() -> Iterator[None]:
    """No cache_size_limit warnings, fake tensors' errors (targets catch them), or backward-hook notes."""
    loggers = [logging.getLogger(n) for n in ("torchkiln", "torch._subclasses.fake_tensor")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


class Epoch:
    """Calls from empty caches, fresh programs and torch's default state.

    Epochs keep a long run compiling: within one, a target's states soon fill its cache entries
    and later new states run eagerly.
    """

    def __init__(self, backend: Any, targets: list[Target], rng: random.Random, report: Report):
        self.backend, self.targets, self.rng, self.report = backend, targets, rng, report
        self.env, self.programs = Env(), {}

    def program(self, target: Target) -> Program:
        if target.name not in self.programs:
            self.programs[target.name] = Program.build(
                target, self.backend, self.report.seed, DYNAMIC[self.report.dynamic]
            )
        return self.programs[target.name]

    def run(self, until: int) -> None:
        torchkiln.reset()
        try:
            while self.report.calls < until:
                self.step()
        finally:
            counters, report = torchkiln.counters, self.report
            report.compiles += counters["frames"]["total"]
            report.recompiles += counters["recompiles"]["total"]
            report.eager_fallbacks += sum(counters["eager_fallback"].values())
            report.per_size += counters["static_shapes"]["specializations"]
            torchkiln.reset()

    def step(self) -> None:
        """Mutate, call one target (or several from threads), record what differed."""
        index, rng = self.report.calls, self.rng
        prog = self.program(rng.choice(self.targets))
        changes, threads = mutate(rng, prog, self.env)
        progs = [prog] * threads
        if threads and rng.random() < P_MIXED_THREADS:
            safe = [t for t in self.targets if t.threads]
            progs = [self.program(rng.choice(safe)) for _ in progs]
        for p in {id(p): p for p in progs or [prog]}.values():
            p.history.append(
                f"call {index}: {'; '.join(changes) if p is prog and changes else 'no change'} | "
                f"env {self.env.changed()} | inputs {p.spec.changed(p.target)}"
                + (f" | knobs {p.changed_knobs()}" if p.target.knobs else "")
                + (
                    f" | from {threads} threads ({', '.join(q.target.name for q in progs)})"
                    if threads
                    else ""
                )
            )
            p.calls += 1
        seed = hash((self.report.seed, index)) & 0xFFFFFFFF
        if threads:
            results = thread_calls([(p, seed + k) for k, p in enumerate(progs)], self.env)
        else:
            progs, results = [prog], [one_call(prog, self.env, seed)]
        self.report.calls += len(results)
        for p in {id(p): p for p in progs if p.orig is not None}.values():
            resync(p)  # rounding differences within tolerance must not add up over calls
        for p, (diffs, crashed) in zip(progs, results):
            if not diffs:
                continue
            self.report.crashes += crashed
            self.report.wrong += not crashed
            self.report.findings.append(
                Finding(
                    "crash" if crashed else "wrong",
                    self.report.dynamic,
                    p.target.name,
                    p.target.category,
                    self.report.backend,
                    self.report.seed,
                    index,
                    threads,
                    p.history[-HISTORY_SHOWN:],
                    diffs,
                )
            )


def table(reports: list[Report]) -> str:
    head = (
        "backend",
        "dynamic",
        "calls",
        "wrong",
        "crashes",
        "compiles",
        "recompiles",
        "eager fallbacks",
        "per-size compiles",
        "seconds",
    )
    rows = [
        (
            r.backend,
            r.dynamic,
            r.calls,
            r.wrong,
            r.crashes,
            r.compiles,
            r.recompiles,
            r.eager_fallbacks,
            r.per_size,
            f"{r.seconds:.1f}",
        )
        for r in reports
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return "\n".join(
        "  ".join(str(x).rjust(w) for x, w in zip(row, widths)) for row in (head, *rows)
    )


def summary(reports: list[Report]) -> str:
    """Every finding, grouped by what differed: the count, the calls, and the first one in full."""
    groups: dict[tuple, list[Finding]] = collections.defaultdict(list)
    for r in reports:
        for f in r.findings:
            groups[f.signature()].append(f)
    lines = [table(reports), ""]
    for (backend, dynamic, category, target, kind, _), found in sorted(groups.items()):
        first = found[0]
        calls = ", ".join(str(f.call) for f in found[:40]) + (" ..." if len(found) > 40 else "")
        threaded = sum(f.threads > 0 for f in found)
        threaded = f" ({threaded} from threads)" if threaded else ""
        lines.append(
            f"[{kind}] {category} / {target} / backend {backend}, dynamic={dynamic}: "
            f"{len(found)} call(s){threaded}: {calls}"
        )
        lines.append(f"  seed {first.seed}, call {first.call}; mutations before it (latest last):")
        lines += [f"    {h}" for h in first.history]
        lines += [f"  - {d}" for d in first.details[:8]]
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# pytest


def calls_for(backend: str) -> int:
    return round(int(os.environ.get("TORCHKILN_FUZZ_CALLS", CI_CALLS)) * SHARE[backend])


@pytest.mark.parametrize("backend", BACKENDS)
def test_guard_fuzz(backend):
    """Zero wrong results and zero crashes; on failure every finding is listed."""
    seed = int(os.environ.get("TORCHKILN_FUZZ_SEED", CI_SEED))
    dynamic = os.environ.get("TORCHKILN_FUZZ_DYNAMIC", "none")
    report = fuzz(backend, calls_for(backend), seed, dynamic=dynamic)
    assert report.calls >= calls_for(backend)
    if report.findings:
        pytest.fail(summary([report]), pytrace=False)


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_guard_fuzz_other_backends(backend):
    """The backends that hand graphs to another runtime, over the inductor's targets: their
    layouts, aliasing and precision against eager's (the fuzz found an output strided, one
    an input, float64 computed in float32, a mode's effect applied twice)."""
    status = backend_status(lookup_backend(backend))
    if not status.usable:
        pytest.skip(status.reason)
    scale = int(os.environ.get("TORCHKILN_FUZZ_CALLS", CI_CALLS)) / CI_CALLS
    calls = round(OTHER_BACKENDS[backend] * scale)
    only = tuple(t.name for t in TARGETS if t.inductor)
    report = fuzz(backend, calls, int(os.environ.get("TORCHKILN_FUZZ_SEED", CI_SEED)), only=only)
    assert report.calls >= calls
    if report.findings:
        pytest.fail(summary([report]), pytrace=False)


def test_guard_fuzz_dynamic_true():
    """``dynamic=True``: every size symbolic from the first call, so symbolic guards (bounds,
    relations between sizes, 0/1 specialization) alone decide which entry serves a call."""
    report = fuzz("eager", CI_DYNAMIC_CALLS, CI_SEED, dynamic="true")
    assert report.calls >= CI_DYNAMIC_CALLS
    if report.findings:
        pytest.fail(summary([report]), pytrace=False)


def test_fuzz_reports_a_stale_graph():
    """The fuzz can fail: a backend that always reuses its first graph (a missing guard) is caught."""
    first: dict[int, torch.fx.GraphModule] = {}

    def stale(gm, example_inputs):
        return first.setdefault(len(example_inputs), gm).forward

    report = fuzz(stale, 40, seed=0, only=("global_reader",))
    assert report.wrong > 0, summary([report])
    assert all(f.target == "global_reader" and f.history for f in report.findings)


def test_low_precision_tolerance_follows_the_operands_of_a_cancelled_result():
    """Seed 139's bfloat16 ``relu(sin(x) + 2 * y)`` near 0, inputs up to 2: eager's 0.00195 and
    inductor's (and float64's) 0.00109 differ by the rounding of the operands, and pass; an
    answer off by a tenth of them (what a stale graph gives) fails; float32 keeps
    assert_close's own tolerances."""
    tol = tolerance(None, operand_scale=2.0)
    expected = torch.tensor([0.00195, 0.0], dtype=torch.bfloat16)
    torch.testing.assert_close(
        torch.tensor([0.00109, 0.0], dtype=torch.bfloat16), expected, **tol(expected)
    )
    with pytest.raises(AssertionError):
        torch.testing.assert_close(
            torch.tensor([0.2, 0.0], dtype=torch.bfloat16), expected, **tol(expected)
        )
    assert tol(torch.zeros(2)) == {}


# ---------------------------------------------------------------------------
# Script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--calls", type=int, default=CI_CALLS, help="calls in all, shared by backends"
    )
    parser.add_argument("--seed", type=int, default=CI_SEED)
    parser.add_argument(
        "--backend", action="append", choices=BACKENDS, help="repeatable; default all"
    )
    parser.add_argument(
        "--target", action="append", help="only these targets or categories (repeatable)"
    )
    parser.add_argument(
        "--dynamic",
        choices=DYNAMIC,
        default=os.environ.get("TORCHKILN_FUZZ_DYNAMIC", "none"),
        help="dynamic= of torchkiln.compile (none: automatic dynamic, the default)",
    )
    parser.add_argument("--verbose", action="store_true", help="show torchkiln's warnings")
    args = parser.parse_args(argv)
    backends = args.backend or list(BACKENDS)
    total_share = sum(SHARE[b] for b in backends)
    torchkiln.config.persist_captures = False  # as in the tests (tests/conftest.py)
    reports = [
        fuzz(
            b,
            round(args.calls * SHARE[b] / total_share),
            args.seed,
            tuple(args.target or ()),
            quiet=not args.verbose,
            dynamic=args.dynamic,
        )
        for b in backends
    ]
    print(summary(reports))
    return 1 if any(r.findings for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
