"""Fake and functional tensor plumbing shared by analysis and tracing."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._higher_order_ops.effects import _get_effect
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.utils import _pytree as pytree
from torch.utils._device import DeviceContext

from torchkiln.exc import KilnError
from torchkiln.static_shapes import has_symbolic_values


def is_symbolic(value: object) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    return isinstance(value, torch.Tensor) and not all(isinstance(s, int) for s in value.shape)


def fake_mode_and_inputs(
    example_inputs: list, gm: torch.fx.GraphModule | None = None
) -> tuple[FakeTensorMode, list]:
    """The fake inputs to trace with, and their mode: the fakes capture recorded on ``gm``'s
    placeholders where the graph has symbolic sizes (of inputs, or the unbacked sizes of
    ops like ``nonzero``: only the capture's ShapeEnv allows those), else those of fake
    example inputs, else static fakes of the real ones."""
    symbolic = _symbolic_placeholders(gm, example_inputs) if gm is not None else None
    if symbolic is not None:
        example_inputs = symbolic
    modes = {id(t.fake_mode): t.fake_mode for t in example_inputs if isinstance(t, FakeTensor)}
    if len(modes) > 1:
        raise KilnError("example inputs come from several FakeTensorModes; pass one mode's tensors")
    if not modes and any(is_symbolic(v) for v in example_inputs):
        raise KilnError("symbolic example inputs must be fake tensors of one FakeTensorMode")
    mode = next(iter(modes.values())) if modes else FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [
        mode.from_tensor(t) if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) else t
        for t in example_inputs
    ]
    return mode, fakes


def _symbolic_placeholders(gm: torch.fx.GraphModule, example_inputs: list) -> list | None:
    """The placeholders' recorded fakes (``example_value``), with the call's requires_grad,
    where a value of the graph has symbolic sizes; None if none has (or they do not match
    the call)."""
    fakes = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    if len(fakes) != len(example_inputs) or not has_symbolic_values(gm):
        return None
    matched = []
    for fake, real in zip(fakes, example_inputs):
        if not isinstance(fake, FakeTensor) or not isinstance(real, torch.Tensor):
            return None
        if fake.requires_grad != real.requires_grad:
            with fake.fake_mode:
                fake = fake.detach().requires_grad_(real.requires_grad)
        matched.append(fake)
    return matched


def untraced(mode: FakeTensorMode) -> contextlib.AbstractContextManager:
    """Around a fake run outside ``make_fx`` (analysis): the unbacked sizes its ops make
    (``nonzero``'s count) are thrown away, not left pending for the next trace to bind."""
    if mode.shape_env is None:
        return contextlib.nullcontext()
    return mode.shape_env.ignore_fresh_unbacked_symbols()


def fresh_copies(fake_inputs: list, mode: FakeTensorMode) -> list:
    """Leaf copies with the same layout and requires_grad, safe to mutate: normal tensors
    even under inference mode, as the real inputs are (views of inference tensors lose
    requires_grad, views of normal ones keep it)."""
    with mode, torch.inference_mode(False), torch.no_grad():
        copies = [
            torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)
            if isinstance(t, torch.Tensor)
            else t
            for t in fake_inputs
        ]
    for copy, t in zip(copies, fake_inputs):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            copy.requires_grad_(True)
    return copies


class _NonLeaf(torch.autograd.Function):
    """A new tensor of the input's layout made by this node: it requires grad and is no leaf."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def non_leaf_copy(t: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor:
    """A copy of ``t`` (that requires grad) that is no leaf, as an input the graph writes in
    place must be: eager refuses to write a leaf that requires grad."""
    with mode, torch.inference_mode(False), torch.enable_grad():  # a normal tensor, as t
        return _NonLeaf.apply(t)


def beneath_user_modes(decompositions: Mapping | None) -> Mapping | None:
    """``decompositions`` run beneath the user's torch function modes, where some are on the
    stack while a graph is traced: a mode changes what the graph's own calls return (eager
    runs them through it, and tracing bakes that in), not the arithmetic inside a kernel,
    which a decomposition writes with torch calls of its own (a batch norm's ``+``)."""
    if not decompositions or not _user_modes():
        return decompositions
    return {op: _beneath_user_modes(fn) for op, fn in decompositions.items()}


def _beneath_user_modes(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with user_modes_suspended():
            return fn(*args, **kwargs)

    return run


def _user_modes() -> list:
    """The torch function modes on the stack but the default device's (``DeviceContext``)."""
    stack = torch.overrides._get_current_function_mode_stack()
    return [mode for mode in stack if not isinstance(mode, DeviceContext)]


@contextlib.contextmanager
def user_modes_suspended() -> Iterator[None]:
    """No torch function modes but the default device's: for what a backend does to an aten
    graph traced with the user's modes baked in (compiling it, rewriting it by tracing)."""
    if not _user_modes():
        yield
        return
    stack = [
        torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())
    ]
    kept = [mode for mode in reversed(stack) if isinstance(mode, DeviceContext)]
    for mode in kept:
        torch._C._push_on_torch_function_stack(mode)
    try:
        yield
    finally:
        for _ in kept:
            torch._C._pop_torch_function_stack()
        for mode in reversed(stack):
            torch._C._push_on_torch_function_stack(mode)


def compiled_beneath_user_modes(compiler: Callable) -> Callable:
    """``compiler`` (a backend's, of aten graphs) run with ``user_modes_suspended``."""

    def compile_graph(gm: Any, example_inputs: list) -> Any:
        with user_modes_suspended():
            return compiler(gm, example_inputs)

    return compile_graph


@contextlib.contextmanager
def functionalized() -> Iterator[None]:
    """Functionalization as PyTorch's own AOT autograd runs it: with the Python dispatcher on,
    so that the Python decompositions registered above autograd run first. Without it an op
    whose schema hides a mutation runs as if pure: CUDA's ``cudnn_batch_norm`` updates the
    running statistics in place, and functionalization would drop that update."""
    with enable_python_dispatcher(), _Functionalize():
        yield


def effect_as_call(func: object) -> bool:
    """Whether ``func`` is an op torch registers as an ordered side effect that returns
    nothing (``aten._linalg_check_errors``, ``torch.linalg.inv``'s check of a singular
    matrix; ``aten._print``): a graph carries it as a plain call. torch's own AOT threads
    "effect tokens" through its graphs for such ops; this layer has no tokens, and torch
    2.13's functionalization refuses the op without one. Traced as a call, the op stays in
    the graph (fx counts it impure) after the values it reads."""
    return (
        isinstance(func, torch._ops.OpOverload)
        and not func._schema.returns
        and _get_effect(func) is not None
    )


class _Functionalize(FunctionalTensorMode):
    """Functionalization that records the ops :func:`effect_as_call` names as plain calls."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if effect_as_call(func):
            args, kwargs = pytree.tree_map_only(FunctionalTensor, from_functional, (args, kwargs))
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def to_functional(t: object) -> object:
    return FunctionalTensor.to_functional(t) if isinstance(t, torch.Tensor) else t


def from_functional(t: object) -> object:
    if isinstance(t, FunctionalTensor):
        torch._sync(t)
        return torch._from_functional_tensor(t.elem)
    return t
