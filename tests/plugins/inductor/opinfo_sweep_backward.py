"""The backward half of the OpInfo sweep: each op's forward and backward graphs, compiled as a
training step compiles them, against eager's outputs and gradients.

Each (op, dtype, sample) is traced to an aten graph of the op alone (with grad on, no
decompositions) and handed to the inductor backend's entry point, ``compile_graph``, as
``torchkiln.compile(backend="inductor")`` hands it a captured graph: the AOT layer traces the
joint graph, decomposes and partitions it, and the inductor compiles the forward, then the
backward at the first backward call. (Capture is left out: the samples' functions rebuild
their arguments with pytree, where it breaks the graph.) The tensors OpInfo's samples make
require grad do, and a fixed random cotangent per output that requires grad gives the
gradients.
A case counts only if the inductor compiled both graphs of a training plan (or loaded them
from its plan cache, as a second process would); one that ran otherwise is skipped, saying
why. Run through ``opinfo_sweep.py --backward``.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from opinfo_sweep import SweepResult
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from torchkiln.aot.api import RUN_AS_CAPTURED
from torchkiln.aot.runtime import TrainingPlan
from torchkiln.testing.opinfo import (
    NotDifferentiable,
    OpSample,
    assert_op_matches,
    backward_dtypes,
    backward_samples,
    eager_gradients,
    flat,
    grad_leaves,
    gradients,
    opinfos,
)
from torchkiln_inductor.backend import compile_graph
from torchkiln_inductor.compile_fx import CompiledGraph


class Skipped(Exception):
    """The case tests nothing of the inductor's backward; the message says why."""


class Failed(Exception):
    """The case differs from eager or raised; the message names the stage."""


def sweep_backward(
    names: list[str] | None,
    dtypes=(torch.float32,),
    max_samples: int = 2,
    opt_level: str = "O1",
    cpu_backend: str = "cpp",
    device: str = "cpu",
    progress: bool = False,
) -> SweepResult:
    """Forward and gradients of the ops ``names`` (all of ``op_db``: ``None``) in the floating
    ``dtypes`` their OpInfo gives a backward on ``device``; ``max_samples`` float32 samples
    and one of each other dtype per op."""
    result = SweepResult()
    options = {"cpp.opt_level": opt_level, "cpu_backend": cpu_backend}
    lowered: dict[str, bool] = {}
    for full_name, op in opinfos(names):
        for case, requires_grad in _cases(result, full_name, op, dtypes, max_samples, device):
            if progress:  # a crash (not an exception) names the case it happened in
                print(f"running {case.op} {case.dtype} backward", file=sys.stderr, flush=True)
            graphs = _record(result, case, requires_grad, options)
            if graphs is not None:
                no_fallback = not any(g.fallbacks for g in graphs)
                lowered[case.op] = lowered.get(case.op, True) and no_fallback
                if graphs[1].fallbacks:
                    result.fallbacks.setdefault(case.op, set()).update(graphs[1].fallbacks)
    for op, _ in result.failed:
        result.passed.pop(op, None)
    result.fallback_only = {op for op in result.passed if not lowered.get(op)}
    return result


def _cases(
    result: SweepResult, name: str, op: Any, dtypes, max_samples: int, device: str
) -> list[tuple[OpSample, list[bool]]]:
    """``op``'s samples in the dtypes it has a backward in, each with which of its tensors
    require grad; none: the reason in ``result``."""
    chosen = backward_dtypes(op, dtypes, device)
    cases = []
    for dtype in chosen:
        count = max_samples if dtype == torch.float32 else 1
        cases += backward_samples(op, name, dtype, count, device)
    if not op.supports_autograd:
        result.skipped[name] = "not differentiable"
    elif not chosen:
        result.skipped[name] = "no backward in these dtypes"
    elif not cases:
        result.skipped[name] = "no sample that eager runs"
    return cases


def _record(
    result: SweepResult, case: OpSample, requires_grad: list[bool], options: dict
) -> list[CompiledGraph] | None:
    """Run one case into ``result``; its forward and backward graphs if it passed."""
    try:
        graphs = check_case(case, requires_grad, options)
    except Skipped as e:
        result.skipped.setdefault(case.op, str(e))
        return None
    except Failed as e:
        result.failed.setdefault((case.op, case.dtype), " ".join(str(e).split())[:300])
        return None
    if (case.op, case.dtype) not in result.failed:
        result.passed.setdefault(case.op, set()).add(case.dtype)
    return graphs


def check_case(case: OpSample, requires_grad: list[bool], options: dict) -> list[CompiledGraph]:
    """Compile ``case`` for training, its inputs marked by ``requires_grad`` requiring grad, and
    compare outputs and gradients with eager's.

    Returns the compiled forward and backward; raises :class:`Failed` (a difference, an
    error) or :class:`Skipped` (nothing to test, or the inductor did not compile both).
    """
    try:
        expected, cots, expected_grads = eager_gradients(case, requires_grad)
    except NotDifferentiable as e:
        raise Skipped(str(e)) from e
    leaves = grad_leaves(case.inputs, requires_grad)
    gm = _trace(case.fn, leaves)
    with _stage("compile"):
        compiled = compile_graph(gm, leaves, **options)
    with _stage("forward"):
        outputs = compiled(*leaves)
        assert_op_matches(case.op, [o.detach() for o in outputs], expected)
    with _stage("backward"):
        grads = gradients(outputs, leaves, cots)
    with _stage("gradient"):
        assert_op_matches(case.op, grads, expected_grads)
    return _compiled_graphs(compiled)


def _trace(fn: Callable, leaves: list[torch.Tensor]) -> torch.fx.GraphModule:
    """The op as aten calls, not decomposed: the AOT layer decomposes it as it does any graph.

    Skipped if its output size or a value it reads depends on the data: capture, which runs
    graphs on fake tensors too, breaks the graph there and runs the op eagerly."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gm = make_fx(flat(fn))(*leaves)
    except Exception as e:
        raise Skipped(f"cannot trace: {type(e).__name__}: {str(e)[:80]}") from e
    try:
        FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*leaves)
    except (DynamicOutputShapeException, DataDependentOutputException) as e:
        raise Skipped(f"a graph break: {e.func} depends on the data") from e
    except Exception:
        pass  # the AOT layer meets it too, and the compile stage reports it
    return gm


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
    try:
        yield
    except Exception as e:
        raise Failed(f"{name}: {type(e).__name__}: {e}") from e


def _compiled_graphs(compiled: Any) -> list[CompiledGraph]:
    """The forward and backward graphs the inductor compiled for the training call."""
    (meta, plan, _, _), *_ = compiled.plans.values()
    if plan is RUN_AS_CAPTURED:
        raise Skipped("runs as captured: its backward has a size that depends on the data")
    if not isinstance(plan, TrainingPlan):
        views = " (its outputs are views of inputs, rebuilt and differentiated eagerly)"
        raise Skipped(f"no training plan{views if meta.aliases else ''}")
    graphs = [plan.forward, plan.compiled_backward]
    if not all(isinstance(g, CompiledGraph) for g in graphs):
        raise Skipped(f"not compiled by the inductor: {[type(g).__name__ for g in graphs]}")
    return graphs
