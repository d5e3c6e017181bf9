"""The conformance kit's catalog: every check a backend is put through, fast ones first.

A :class:`Check` is one named, independent comparison with eager for one backend;
:func:`checks` lists them for a registered backend, from its record (the options,
modes, requirements and dtypes it declares). The pytest plugin
(``torchkiln.testing.pytest_plugin``) turns them into test items; a backend's own
test suite can parametrize over them with :func:`kit_params`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

import torchkiln
from torchkiln import config
from torchkiln.disk_cache import scratch_dir
from torchkiln.registry import ensure_usable, lookup_backend
from torchkiln.testing import declared, semantics
from torchkiln.testing.compare import Target, run_module_compared
from torchkiln.testing.models import MODELS, ModelCase
from torchkiln.testing.opinfo import (
    SWEEP_OPS,
    NotDifferentiable,
    assert_op_matches,
    backward_dtypes,
    backward_samples,
    eager_gradients,
    flat,
    grad_leaves,
    gradients,
    opinfos,
    samples,
)

#: The op sweep's fast subset: one or two ops of each family.
FAST_OPS = [
    "add",
    "mul",
    "div",
    "exp",
    "tanh",
    "sum",
    "amax",
    "softmax",
    "mm",
    "cat",
    "transpose",
    "where",
]

#: The backward sweep's fast subset: a pointwise op, a reduction, a normalization, a matmul,
#: a gather and a structural op.
FAST_GRAD_OPS = ["mul", "tanh", "sum", "softmax", "mm", "gather", "cat"]

#: The pytest marker on checks left out of the default (fast) run.
SLOW_MARKER = "kiln_slow"


@dataclass(frozen=True)
class Check:
    """One check of the kit: ``run()`` raises ``AssertionError`` (or the backend's error)."""

    backend: str
    id: str
    body: Callable[[Target], None]
    slow: bool = False
    doc: str = ""

    def run(self) -> None:
        """Run the check in a clean state: no capture cached, none read from disk."""
        record = lookup_backend(self.backend)
        with _isolated():
            self.body(Target(self.backend, device="cuda" if record.device == "cuda" else "cpu"))

    def __str__(self) -> str:
        return f"{self.backend}:{self.id}"


@contextlib.contextmanager
def _isolated() -> Iterator[None]:
    """No capture cached, none read from disk, and no cache another process left: its plans
    would hide what this run's compile does (a graph whose compile failed is stored as the
    graph it ran instead, and loads without the warning). This process's checks share a
    cache folder of its own, removed at exit."""
    persist, cache = config.persist_captures, os.environ.get(CACHE_DIR_VARIABLE)
    config.persist_captures = False
    os.environ[CACHE_DIR_VARIABLE] = str(scratch_dir() / "kit-cache")
    torchkiln.reset()
    try:
        yield
    finally:
        config.persist_captures = persist
        if cache is None:
            del os.environ[CACHE_DIR_VARIABLE]
        else:
            os.environ[CACHE_DIR_VARIABLE] = cache
        torchkiln.reset()


#: ``torchkiln.disk_cache.cache_dir()`` reads it on every call
CACHE_DIR_VARIABLE = "TORCHKILN_CACHE_DIR"


#: The dtypes an op that has no sample in a backend's declared ones (bitwise ops, say) is
#: checked in: the first its OpInfo supports
INTEGER_DTYPES = (torch.int64, torch.int32, torch.bool)


def _op_check(op: str, dtypes: tuple[torch.dtype, ...], target: Target) -> None:
    """Each OpInfo sample of ``op`` (two in float32, one in each other dtype) against eager;
    an op with no sample in ``dtypes`` (integer ops) is checked in its first integer dtype.
    A sample whose call never reaches the backend (a graph break before its only op, as a
    ``narrow`` whose start is a tensor) is compared with eager but not counted: every op
    needs one sample that the backend ran."""
    _needs_expecttest()
    ran = compared = 0
    for full_name, info in opinfos([op]):
        supported = info.supported_dtypes(target.device)
        chosen = [d for d in dtypes if d in supported]
        if not chosen:
            chosen = [d for d in INTEGER_DTYPES if d in supported][:1]
        for dtype in chosen:
            count = 2 if dtype == torch.float32 else 1
            for sample in samples(info, full_name, dtype, count, target.device):
                torchkiln.reset()  # the samples' functions share one code object
                before = target.graphs
                try:
                    actual = target.compile(sample.fn)(*sample.inputs)
                    assert_op_matches(full_name, pytree.tree_leaves(actual), sample.expected)
                except Exception as e:
                    shapes = [tuple(t.shape) for t in sample.inputs]
                    raise AssertionError(
                        f"{full_name} {dtype}, inputs of shapes {shapes}: {type(e).__name__}: {e}"
                    ) from e
                compared += 1
                ran += target.graphs > before
    assert compared, f"OpInfo has no sample of {op!r} in {[str(d) for d in dtypes]} that eager runs"
    assert ran, f"none of the {compared} samples of {op!r} reached the backend (graph breaks)"


def _grad_check(op: str, target: Target) -> None:
    """Outputs and input gradients of two float32 OpInfo samples of ``op`` against eager's,
    under one fixed random cotangent per output. Samples eager can't differentiate are left
    out (an op with none is skipped); one that never reaches the backend is not counted."""
    _needs_expecttest()
    ran = compared = 0
    for full_name, info in opinfos([op]):
        if not backward_dtypes(info, (torch.float32,), target.device):
            continue
        for case, requires_grad in backward_samples(
            info, full_name, torch.float32, 2, target.device
        ):
            try:
                expected, cots, expected_grads = eager_gradients(case, requires_grad)
            except NotDifferentiable:
                continue
            torchkiln.reset()  # the samples' functions share one code object
            before = target.graphs
            leaves = grad_leaves(case.inputs, requires_grad)
            stage = "forward"
            try:
                outputs = flat(target.compile(case.fn))(*leaves)
                assert_op_matches(full_name, [o.detach() for o in outputs], expected)
                stage = "gradient"
                grads = gradients(outputs, leaves, cots)
                assert_op_matches(full_name, grads, expected_grads)
            except Exception as e:
                shapes = [tuple(t.shape) for t in case.inputs]
                raise AssertionError(
                    f"{full_name} {stage}, inputs of shapes {shapes}: {type(e).__name__}: {e}"
                ) from e
            compared += 1
            ran += target.graphs > before
    if not compared:
        import pytest

        pytest.skip(f"eager differentiates no float32 sample of {op!r}")
    assert ran, f"none of the {compared} samples of {op!r} reached the backend (graph breaks)"


def _needs_expecttest() -> None:
    if importlib.util.find_spec("expecttest") is None:
        import pytest

        pytest.skip("the op sweep reads OpInfo, which needs expecttest: pip install expecttest")


def _model_check(case: ModelCase, train: bool, target: Target) -> None:
    model = case.make().to(target.device).train(case.train_mode)
    run_module_compared(target, model, lambda: case.batch(target.device), train=train)


def _declared_dtypes(name: str, declared_names: tuple[str, ...]) -> tuple[torch.dtype, ...]:
    dtypes = []
    for dtype_name in declared_names:
        dtype = getattr(torch, dtype_name, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(
                f"backend {name!r} declares dtypes={declared_names}: {dtype_name!r} is not a "
                "torch dtype; name them as torch does, e.g. ('bfloat16', 'float16')"
            )
        dtypes.append(dtype)
    return (torch.float32, *dict.fromkeys(d for d in dtypes if d != torch.float32))


def checks(backend: str) -> list[Check]:
    """Every check of the kit for the registered ``backend``, which must be usable here."""
    record = lookup_backend(backend)
    ensure_usable(record)
    dtypes = _declared_dtypes(backend, record.dtypes)
    found: list[Check] = []

    def add(id: str, body: Callable[[Target], None], slow: bool = False) -> None:
        doc = (getattr(body, "__doc__", None) or "").strip().splitlines()
        found.append(Check(backend, id, body, slow, doc[0] if doc else ""))

    for op in dict.fromkeys([*FAST_OPS, *SWEEP_OPS]):
        add(f"ops/{op}", functools.partial(_op_check, op, dtypes), slow=op not in FAST_OPS)
    for op in dict.fromkeys([*FAST_GRAD_OPS, *SWEEP_OPS]):
        add(f"grads/{op}", functools.partial(_grad_check, op), slow=op not in FAST_GRAD_OPS)
    for case in MODELS:
        for train in (False, True):
            kind = "training" if train else "inference"
            add(
                f"models/{case.name}[{kind}]",
                functools.partial(_model_check, case, train),
                slow=case.slow,
            )
    for body in (
        semantics.mutated_inputs,
        semantics.multiple_outputs,
        semantics.aliasing_outputs,
        semantics.non_contiguous_inputs,
        semantics.scalars,
        semantics.results_do_not_alias_across_calls,
    ):
        add(f"semantics/{body.__name__.replace('_', '-')}", body)
    if record.options:
        add(
            "options/defaults", functools.partial(declared.options_at_their_defaults, record=record)
        )
    for mode in record.modes:
        if mode != "default":
            add(f"modes/{mode}", functools.partial(declared.mode, name=mode))
    if record.requires:
        add(
            "requires/missing-dependency-message",
            lambda _target: declared.missing_dependency_message(record),
        )
    return found


def kit_params(backend: str, xfail: Mapping[str, str] | None = None) -> list[Any]:
    """The checks as ``pytest.param``s, for a backend's own suite::

        @pytest.mark.parametrize("check", kit_params("mybackend"))
        def test_conformance(check):
            check.run()

    Slow checks carry the ``kiln_slow`` marker. ``xfail`` maps a check's id (``"ops/cat"``)
    to why it is known to fail: it is marked ``xfail(strict=True)``, so it is reported,
    and fixing it turns the run red until the entry goes.
    """
    import pytest

    found = checks(backend)
    unknown = sorted(set(xfail or {}) - {c.id for c in found})
    if unknown:
        raise ValueError(
            f"kit_params({backend!r}, xfail=...) names checks the kit does not have: {unknown}; "
            "use the ids of torchkiln.testing.checks(backend), e.g. 'ops/cat'"
        )
    params = []
    for check in found:
        marks = [getattr(pytest.mark, SLOW_MARKER)] if check.slow else []
        if check.id in (xfail or {}):
            marks.append(pytest.mark.xfail(reason=xfail[check.id], strict=True))
        params.append(pytest.param(check, id=str(check), marks=marks))
    return params
