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
from torch.utils import _pytree as pytree

from torchkiln.aot.api import RUN_AS_CAPTURED
from torchkiln.aot.runtime import TrainingPlan
from torchkiln.testing.opinfo import OpSample, assert_op_matches, opinfos, samples
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
    chosen = _backward_dtypes(op, dtypes, device)
    cases = []
    for dtype in chosen:
        count = max_samples if dtype == torch.float32 else 1
        masks = _grad_masks(op, dtype, device, count)
        for case in samples(op, name, dtype, count, device):
            floating = [t.is_floating_point() for t in case.inputs]
            cases.append((case, masks.get(_signature(case.inputs), floating)))
    if not op.supports_autograd:
        result.skipped[name] = "not differentiable"
    elif not chosen:
        result.skipped[name] = "no backward in these dtypes"
    elif not cases:
        result.skipped[name] = "no sample that eager runs"
    return cases


def _backward_dtypes(op: Any, dtypes, device: str) -> list[torch.dtype]:
    """The floating ``dtypes`` in which OpInfo says ``op`` has a backward on ``device``."""
    if not op.supports_autograd:
        return []
    supported = op.supported_backward_dtypes(device)
    return [d for d in dtypes if d.is_floating_point and d in supported]


def _grad_masks(op: Any, dtype: torch.dtype, device: str, count: int) -> dict[tuple, list[bool]]:
    """Which tensors of each sample OpInfo makes require grad (not a batch norm's running
    statistics, say), by the sample's tensor shapes and dtypes (``samples`` keeps only those)."""
    masks: dict[tuple, list[bool]] = {}
    try:
        raw = list(op.sample_inputs(device, dtype, requires_grad=True))[:count]
    except Exception:
        return masks
    for sample in raw:
        leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        masks.setdefault(_signature(tensors), [t.requires_grad for t in tensors])
    return masks


def _signature(tensors: list[torch.Tensor]) -> tuple:
    return tuple((tuple(t.shape), t.dtype) for t in tensors)


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
    if not any(requires_grad):
        raise Skipped("no input requires grad")
    expected, cotangents, expected_grads = _eager(case, requires_grad)
    leaves = _leaves(case.inputs, requires_grad)
    gm = _trace(case.fn, leaves)
    with _stage("compile"):
        compiled = compile_graph(gm, leaves, **options)
    with _stage("forward"):
        outputs = compiled(*leaves)
        assert_op_matches(case.op, [o.detach() for o in outputs], expected)
    with _stage("backward"):
        grads = _grads(outputs, leaves, cotangents)
    with _stage("gradient"):
        assert_op_matches(case.op, grads, expected_grads)
    return _compiled_graphs(compiled)


def _eager(case: OpSample, requires_grad: list[bool]) -> tuple[list, list, tuple]:
    """Eager's outputs, the cotangents (``None`` for outputs that need none) and gradients."""
    leaves = _leaves(case.inputs, requires_grad)
    try:
        outputs = _flat(case.fn)(*leaves)
    except Exception as e:
        raise Skipped(f"eager forward with grad: {type(e).__name__}") from e
    cotangents = _cotangents(outputs)
    if all(c is None for c in cotangents):
        raise Skipped("no output requires grad")
    try:
        grads = _grads(outputs, leaves, cotangents)
    except Exception as e:
        raise Skipped(f"eager backward: {type(e).__name__}: {e}"[:160]) from e
    return [o.detach() for o in outputs], cotangents, grads


def _leaves(inputs: list[torch.Tensor], requires_grad: list[bool]) -> list[torch.Tensor]:
    """Fresh leaf copies of ``inputs``: eager and compiled runs share no autograd graph."""
    return [t.detach().clone().requires_grad_(r) for t, r in zip(inputs, requires_grad)]


def _flat(fn: Callable) -> Callable[..., tuple]:
    return lambda *args: tuple(pytree.tree_leaves(fn(*args)))


def _cotangents(outputs: tuple) -> list[torch.Tensor | None]:
    """The same random cotangents for eager and compiled runs: a sum of outputs would give
    every output a gradient of ones, which hides a transposed or misplaced gradient."""
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(o.shape, generator=gen).to(o.dtype).to(o.device) if o.requires_grad else None
        for o in outputs
    ]


def _grads(outputs, leaves: list[torch.Tensor], cotangents: list) -> tuple[torch.Tensor, ...]:
    """Gradients of the inputs that require grad; zeros for those the outputs don't use."""
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if c is not None]
    return torch.autograd.grad(
        [o for o, _ in pairs],
        [t for t in leaves if t.requires_grad],
        [c for _, c in pairs],
        allow_unused=True,
        materialize_grads=True,
    )


def _trace(fn: Callable, leaves: list[torch.Tensor]) -> torch.fx.GraphModule:
    """The op as aten calls, not decomposed: the AOT layer decomposes it as it does any graph.

    Skipped if its output size or a value it reads depends on the data: capture, which runs
    graphs on fake tensors too, breaks the graph there and runs the op eagerly."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gm = make_fx(_flat(fn))(*leaves)
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
