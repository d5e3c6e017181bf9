"""Compare compiled ops with eager on PyTorch's OpInfo sample inputs.

Every (op, dtype, sample) becomes one aten graph; all graphs of a sweep are
generated first and their kernels compiled in a single C++ translation unit
(one compiler run), then each is run and compared with eager.
Run as a script for a report: ``python tests/plugins/inductor/opinfo_sweep.py [--full]
[--triton] [--cuda [--progress]]`` (``--triton``: CPU tensors through the Triton generator, run by its
interpreter; ``--cuda``: CUDA tensors, so Triton on the GPU, in float32, bfloat16, float16
and int64; ``--progress`` names each case on stderr before it runs).
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from inductor_testing import aten_graph
from torch.utils import _pytree as pytree

from torchkiln_inductor.compile_fx import compile_many, generate
from torchkiln_inductor.options import InductorOptions

#: ops whose results are random: only their shapes and dtypes are compared
RANDOM = {
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

#: the CI sweep: ops with lowerings (views, pointwise, reductions, indexing, ...)
CI_OPS = [
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


_DATA_DEPENDENT = {torch.ops.prims.item.default, torch.ops.aten._local_scalar_dense.default}


@dataclass
class Case:
    op: str
    dtype: torch.dtype
    fn: Any
    inputs: list[torch.Tensor]
    expected: list[torch.Tensor]
    generated: Any = None


@dataclass
class SweepResult:
    passed: dict[str, set] = field(default_factory=dict)  # op -> dtypes
    failed: dict[tuple[str, torch.dtype], str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    fallback_only: set[str] = field(default_factory=set)


def _cases(op, name: str, dtype, max_samples: int, device: str) -> list[Case]:
    cases = []
    try:
        samples = list(op.sample_inputs(device, dtype, requires_grad=False))[:max_samples]
    except Exception:
        return []
    for sample in samples:
        tree = (sample.input, sample.args, sample.kwargs)
        leaves, spec = pytree.tree_flatten(tree)
        positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        tensors = [leaves[i].clone() for i in positions]

        def fn(*ts, leaves=leaves, positions=positions, spec=spec, opfn=op.op):
            filled = list(leaves)
            for i, t in zip(positions, ts):
                filled[i] = t
            inp, args, kwargs = pytree.tree_unflatten(filled, spec)
            return opfn(inp, *args, **kwargs)

        try:
            out = fn(*tensors)
        except Exception:
            continue
        outs = pytree.tree_leaves(out)
        if any(o.layout != torch.strided for o in outs if isinstance(o, torch.Tensor)):
            continue
        if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            continue
        if any(o.is_complex() for o in outs) or any(t.is_complex() for t in tensors):
            continue
        cases.append(Case(name, dtype, fn, tensors, outs))
    return cases


def sweep(
    names: list[str] | None,
    dtypes=(torch.float32, torch.bfloat16, torch.int64),
    max_samples: int = 2,
    opt_level: str = "O1",
    cpu_backend: str = "cpp",
    device: str = "cpu",
    progress: bool = False,
) -> SweepResult:
    from torch.testing._internal.common_methods_invocations import op_db

    result = SweepResult()
    wanted = set(names) if names is not None else None
    cases: list[Case] = []
    seen = set()
    for op in op_db:
        full_name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
        if (wanted is not None and op.name not in wanted) or full_name in seen:
            continue
        seen.add(full_name)
        for dtype in dtypes:
            if dtype not in op.supported_dtypes(device):
                continue
            samples = max_samples if dtype == torch.float32 else 1
            cases += _cases(op, full_name, dtype, samples, device)
    options = InductorOptions(opt_level=opt_level, cpu_backend=cpu_backend)
    ready = []
    for case in cases:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gm = aten_graph(case.fn, *case.inputs)
        except Exception as e:
            result.skipped.setdefault(case.op, f"cannot trace: {type(e).__name__}")
            continue
        if any(n.target in _DATA_DEPENDENT for n in gm.graph.nodes):
            result.skipped.setdefault(case.op, "data-dependent decomposition (.item())")
            continue
        try:
            case.generated = generate(gm, case.inputs, options)
            ready.append(case)
        except Exception as e:
            result.failed[(case.op, case.dtype)] = f"compile: {type(e).__name__}: {e}"[:300]
    compiled = compile_many([c.generated for c in ready], opt_level)
    lowered: dict[str, bool] = {}
    for case, fn in zip(ready, compiled):
        key = (case.op, case.dtype)
        if progress:  # a crash (not an exception) names the case it happened in
            print(f"running {case.op} {case.dtype}", file=sys.stderr, flush=True)
        try:
            actual = list(fn(*case.inputs))
            assert len(actual) == len(case.expected), "number of outputs"
            for a, e in zip(actual, case.expected):
                assert a.shape == e.shape and a.dtype == e.dtype, (
                    f"{a.shape}/{a.dtype} vs {e.shape}/{e.dtype}"
                )
                if case.op.split(".")[0] in RANDOM or case.op in RANDOM:
                    continue
                if e.dtype in (torch.bfloat16, torch.float16):
                    torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2, equal_nan=True)
                else:
                    torch.testing.assert_close(
                        a,
                        e,
                        equal_nan=True,
                        rtol=1e-4 if e.dtype == torch.float32 else None,
                        atol=1e-5 if e.dtype == torch.float32 else None,
                    )
        except Exception as e:
            result.failed.setdefault(key, f"run: {type(e).__name__}: {e}"[:300])
            continue
        if key not in result.failed:
            result.passed.setdefault(case.op, set()).add(case.dtype)
        lowered[case.op] = lowered.get(case.op, True) and not fn.fallbacks
    for op, _ in result.failed:
        result.passed.pop(op, None)
    result.fallback_only = {op for op in result.passed if not lowered.get(op)}
    return result


def main() -> None:
    full = "--full" in sys.argv
    backend = "triton" if "--triton" in sys.argv else "cpp"  # Triton's interpreter on CPU
    names = None if full else CI_OPS
    if "--cuda" in sys.argv:
        dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.int64)
        res = sweep(names, dtypes=dtypes, device="cuda", progress="--progress" in sys.argv)
    else:
        res = sweep(names, cpu_backend=backend)
    for (op, dtype), why in sorted(res.failed.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print(f"FAIL {op} {dtype}: {why}")
    covered = sorted(set(res.passed) - res.fallback_only)
    print(
        f"\npassed {len(res.passed)} ops ({len(covered)} lowered, no aten fallback); "
        f"failed {len({op for op, _ in res.failed})}; skipped {len(res.skipped)}"
    )
    print("covered:", " ".join(covered))
    print("fallback only:", " ".join(sorted(res.fallback_only)))


if __name__ == "__main__":
    main()
