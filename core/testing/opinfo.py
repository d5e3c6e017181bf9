"""PyTorch's OpInfo samples as flat functions of tensors, and how to compare their results.

Shared by the conformance kit's op sweep (any backend, through ``torchkiln.compile``)
and the inductor plugin's batch sweep (``tests/plugins/inductor/opinfo_sweep.py``).
OpInfo lives in ``torch.testing._internal``, which needs the ``expecttest`` package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

#: ops whose results are random: only their shapes and dtypes are compared
RANDOM_OPS = {
    "bernoulli",
    "normal",
    "rand_like",
    "randn_like",
    "randint_like",
    "nn.functional.dropout",
    "uniform",
    "multinomial",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout",
    "randint",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "nn.functional.dropout2d",
    "nn.functional.dropout3d",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
    "normal_",
    "randn",
    "rand",
    "nn.functional.rrelu",
    "empty_permuted",
    "nn.functional.feature_alpha_dropout.with_train",
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d",
    "nn.functional.multi_head_attention_forward",
}

#: Common ops (views, pointwise, reductions, indexing, matmuls): the kit's full sweep
#: and the inductor plugin's CI sweep.
SWEEP_OPS = [
    "abs",
    "acos",
    "acosh",
    "add",
    "addcdiv",
    "addcmul",
    "all",
    "amax",
    "amin",
    "any",
    "arange",
    "argmax",
    "argmin",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "cat",
    "ceil",
    "clamp",
    "clamp_max",
    "clamp_min",
    "clone",
    "copysign",
    "cos",
    "cosh",
    "diag_embed",
    "div",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "exp2",
    "expand",
    "expand_as",
    "expm1",
    "flatten",
    "flip",
    "floor",
    "floor_divide",
    "fmod",
    "frac",
    "full_like",
    "gather",
    "hypot",
    "index_select",
    "isinf",
    "isnan",
    "le",
    "lerp",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logsumexp",
    "lt",
    "masked_fill",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mul",
    "nan_to_num",
    "ne",
    "neg",
    "nn.functional.elu",
    "nn.functional.embedding",
    "nn.functional.gelu",
    "nn.functional.hardtanh",
    "nn.functional.layer_norm",
    "nn.functional.leaky_relu",
    "nn.functional.pad",
    "nn.functional.relu",
    "nn.functional.silu",
    "nn.functional.softplus",
    "ones_like",
    "permute",
    "pow",
    "prod",
    "reciprocal",
    "remainder",
    "repeat",
    "reshape",
    "round",
    "rsqrt",
    "rsub",
    "select",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "slice",
    "softmax",
    "log_softmax",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "sub",
    "sum",
    "t",
    "tan",
    "tanh",
    "transpose",
    "tril",
    "triu",
    "true_divide",
    "trunc",
    "unbind",
    "unsqueeze",
    "var",
    "var_mean",
    "view",
    "where",
    "xlogy",
    "zeros_like",
    "nn.functional.mse_loss",
    "narrow",
    "movedim",
    "roll",
    "select_scatter",
    "slice_scatter",
    "index_put",
    "scatter_add",
    "cumsum",
    "mm",
    "addmm",
    "bmm",
]


@dataclass
class OpSample:
    """One OpInfo sample: ``fn(*inputs)`` calls the op; ``expected`` is what eager returned."""

    op: str
    dtype: torch.dtype
    fn: Callable[..., Any]
    inputs: list[torch.Tensor]
    expected: list[torch.Tensor]


def opinfos(names: Iterable[str] | None = None) -> Iterator[tuple[str, Any]]:
    """``(full name, OpInfo)`` for each entry of ``op_db`` named in ``names`` (all: ``None``)."""
    op_db = _op_db()

    wanted = set(names) if names is not None else None
    seen = set()
    for op in op_db:
        full_name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        if (wanted is not None and op.name not in wanted) or full_name in seen:
            continue
        seen.add(full_name)
        yield full_name, op


def _op_db() -> list:
    """torch's OpInfo database. Importing it runs ``torch.testing._internal.common_utils``,
    which replaces ``ScriptFunction.__call__`` and ``ScriptMethod.__call__`` with profiling
    wrappers for torch's own test suite: the calls are put back as they were, so that calling
    (or compiling a call of) a TorchScript function later in this process is unchanged."""
    script_call, method_call = torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__
    from torch.testing._internal.common_methods_invocations import op_db

    torch._C.ScriptFunction.__call__ = script_call
    torch._C.ScriptMethod.__call__ = method_call
    return op_db


def samples(
    op: Any, name: str, dtype: torch.dtype, max_samples: int, device: str
) -> list[OpSample]:
    """Up to ``max_samples`` of ``op``'s samples that eager runs to dense, real tensors.

    Each sample becomes a function of its tensors only; the other arguments are
    baked in, so a compiler sees the tensors as inputs and the rest as constants.
    """
    out = []
    try:
        raw = list(op.sample_inputs(device, dtype, requires_grad=False))[:max_samples]
    except Exception:
        return []
    for sample in raw:
        leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        tensors = [leaves[i].clone() for i in positions]
        constants = [None if i in positions else v for i, v in enumerate(leaves)]

        def fn(*ts, constants=constants, positions=positions, spec=spec, opfn=op.op):
            filled = list(constants)
            for i, t in zip(positions, ts):
                filled[i] = t
            inp, args, kwargs = pytree.tree_unflatten(filled, spec)
            return opfn(inp, *args, **kwargs)

        try:
            result = fn(*tensors)
        except Exception:
            continue
        outs = pytree.tree_leaves(result)
        if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            continue
        if any(o.layout != torch.strided or o.is_complex() for o in outs):
            continue
        if any(t.is_complex() for t in tensors):
            continue
        out.append(OpSample(name, dtype, fn, tensors, outs))
    return out


def assert_op_matches(op: str, actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]):
    """``actual`` (a flat list of an op's outputs) matches eager's within the op's dtype's tolerance.

    Random ops are compared by shape and dtype only; float32 to 1e-4 relative (kernels
    may reorder reductions), bfloat16 and float16 to 2e-2.
    """
    actual = list(actual)
    assert len(actual) == len(expected), f"{len(actual)} outputs, eager has {len(expected)}"
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (
            f"{a.shape}/{a.dtype} vs eager's {e.shape}/{e.dtype}"
        )
        if op.split(".")[0] in RANDOM_OPS or op in RANDOM_OPS:
            continue
        if e.dtype in (torch.bfloat16, torch.float16):
            torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2, equal_nan=True)
        elif e.dtype == torch.float32:
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-5, equal_nan=True)
        else:
            torch.testing.assert_close(a, e, equal_nan=True)


class NotDifferentiable(Exception):
    """Eager gives a sample no gradient to compare (the message says why): not a failure."""


def backward_dtypes(op: Any, dtypes: Iterable[torch.dtype], device: str) -> list[torch.dtype]:
    """The floating ``dtypes`` in which OpInfo says ``op`` has a backward on ``device``."""
    if not op.supports_autograd:
        return []
    supported = op.supported_backward_dtypes(device)
    return [d for d in dtypes if d.is_floating_point and d in supported]


def backward_samples(
    op: Any, name: str, dtype: torch.dtype, max_samples: int, device: str
) -> list[tuple[OpSample, list[bool]]]:
    """:func:`samples`, each with which of its tensors require grad: those OpInfo makes
    require grad (not a batch norm's running statistics, say), else the floating ones."""
    masks = _grad_masks(op, dtype, device, max_samples)
    return [
        (case, masks.get(_signature(case.inputs), [t.is_floating_point() for t in case.inputs]))
        for case in samples(op, name, dtype, max_samples, device)
    ]


def _grad_masks(op: Any, dtype: torch.dtype, device: str, count: int) -> dict[tuple, list[bool]]:
    """OpInfo's ``requires_grad`` of each sample's tensors, by the sample's tensor shapes and
    dtypes (``samples`` keeps only those)."""
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


def _signature(tensors: Sequence[torch.Tensor]) -> tuple:
    return tuple((tuple(t.shape), t.dtype) for t in tensors)


def grad_leaves(
    inputs: Sequence[torch.Tensor], requires_grad: Sequence[bool]
) -> list[torch.Tensor]:
    """Fresh leaf copies of ``inputs``: eager and compiled runs share no autograd graph."""
    return [t.detach().clone().requires_grad_(r) for t, r in zip(inputs, requires_grad)]


def flat(fn: Callable) -> Callable[..., tuple]:
    """``fn`` returning its tensors as one flat tuple."""
    return lambda *args: tuple(pytree.tree_leaves(fn(*args)))


def cotangents(outputs: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """The same random cotangents for eager and compiled runs (``None`` for an output that
    needs none): a sum of outputs would give every output a gradient of ones, which hides a
    transposed or misplaced gradient."""
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(o.shape, generator=gen).to(o.dtype).to(o.device) if o.requires_grad else None
        for o in outputs
    ]


def gradients(
    outputs: Sequence[torch.Tensor], leaves: Sequence[torch.Tensor], cotangents: Sequence
) -> tuple[torch.Tensor, ...]:
    """Gradients of the inputs that require grad; zeros for those the outputs don't use."""
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if c is not None]
    return torch.autograd.grad(
        [o for o, _ in pairs],
        [t for t in leaves if t.requires_grad],
        [c for _, c in pairs],
        allow_unused=True,
        materialize_grads=True,
    )


def eager_gradients(case: OpSample, requires_grad: Sequence[bool]) -> tuple[list, list, tuple]:
    """Eager's outputs, the cotangents and the gradients of ``case``; raises
    :class:`NotDifferentiable` where eager has none to compare."""
    if not any(requires_grad):
        raise NotDifferentiable("no input requires grad")
    leaves = grad_leaves(case.inputs, requires_grad)
    try:
        outputs = flat(case.fn)(*leaves)
    except Exception as e:
        raise NotDifferentiable(f"eager forward with grad: {type(e).__name__}") from e
    cots = cotangents(outputs)
    if all(c is None for c in cots):
        raise NotDifferentiable("no output requires grad")
    try:
        grads = gradients(outputs, leaves, cots)
    except Exception as e:
        raise NotDifferentiable(f"eager backward: {type(e).__name__}: {e}"[:160]) from e
    return [o.detach() for o in outputs], cots, grads
