"""Every op the C++ generator emits, through the Triton generator (``cpu_backend="triton"``).

Triton's interpreter runs the kernels on CPU tensors (``TRITON_INTERPRET=1``, set in
``tests/conftest.py``), so shapes are tiny. Each case is compared with eager, and the
same graph lowered for the C++ generator must not lower anything that the Triton one
sends to aten. ``TORCHKILN_TRITON_SWEEP=full`` also runs the OpInfo sweep of all of
``op_db`` through Triton (the default runs a few ops of it).
"""

import os

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import aten_graph, check, compile_fn

import torchkiln
from torchkiln_inductor.compile_fx import generate
from torchkiln_inductor.options import parse_options

pytest.importorskip("triton", reason="triton is not installed")

TRITON = {"cpu_backend": "triton"}
FULL = os.environ.get("TORCHKILN_TRITON_SWEEP") == "full"


def _ints(*shape, lo=-20, hi=20, dtype=torch.int64):
    return torch.randint(lo, hi, shape, dtype=dtype)


def _nonzero_ints(*shape, dtype=torch.int64):
    x = torch.randint(1, 8, shape, dtype=dtype)
    return torch.where(torch.rand(shape) < 0.5, -x, x)


def _halves():
    """Halfway cases (round to even), integers, signed zeros and ordinary values."""
    return torch.cat([torch.arange(-6, 6) * 0.5, torch.tensor([0.0, -0.0]), torch.randn(10) * 4])


def _specials():
    return torch.tensor([1.0, -2.5, 0.0, -0.0, float("inf"), -float("inf"), float("nan"), 3e38])


def _signs_and_twos(x):
    """-1, 1 and a few 2s: products of a long row stay exact whatever their order."""
    return torch.where(x > 2.5, 2.0, torch.where(x < 0, -1.0, 1.0))


def _unit():
    return torch.rand(4, 5) * 1.98 - 0.99


#: case id -> (function, its inputs)
CASES = {
    # transcendental and special functions (core tl or libdevice)
    "erf_erfc_erfinv": (
        lambda x, u: (x.erf(), x.erfc(), u.erfinv()),
        lambda: (torch.randn(4, 5) * 2, _unit()),
    ),
    "lgamma": (torch.lgamma, lambda: (torch.randn(4, 5) * 3,)),
    "tanh": (torch.tanh, lambda: (torch.cat([torch.randn(10) * 3, torch.randn(10) * 1e-4]),)),
    "log1p_expm1": (
        lambda x: (x.log1p(), x.expm1()),
        lambda: (torch.cat([torch.rand(10) * 1e-5, torch.rand(10) * 3]),),
    ),
    "trig": (
        lambda x, u: (x.tan(), u.asin(), u.acos(), x.atan()),
        lambda: (torch.randn(4, 5), _unit()),
    ),
    "hyperbolic": (
        lambda x, u: (x.sinh(), x.cosh(), x.asinh(), (x.abs() + 1).acosh(), u.atanh()),
        lambda: (torch.randn(4, 5) * 2, _unit()),
    ),
    "logs_exps": (
        lambda x: (x.log(), x.log2(), x.log10(), x.exp(), x.exp2(), x.sqrt(), x.rsqrt()),
        lambda: (torch.rand(4, 5) * 10 + 1e-3,),
    ),
    "atan2_hypot_copysign": (
        lambda a, b: (torch.atan2(a, b), torch.hypot(a, b), torch.copysign(a, b)),
        lambda: (torch.randn(4, 5), torch.cat([torch.randn(3, 5), torch.zeros(1, 5)])),
    ),
    "pow_float_exponents": (
        lambda x, y: (x.abs() ** y, x**2, x**3, x**0.5, x**-1, torch.pow(2.0, y)),
        lambda: (torch.randn(4, 5), torch.randn(4, 5) * 3),
    ),
    "pow_int": (
        lambda a, b: (a**b, a**2, a**3),
        lambda: (_ints(4, 5, lo=-3, hi=4), _ints(4, 5, lo=-2, hi=6)),
    ),
    # Python semantics of remainder and floor division; C semantics of fmod and trunc division
    "remainder_fmod_float": (
        lambda a, b: (torch.remainder(a, b), torch.fmod(a, b), torch.floor_divide(a, b)),
        lambda: (torch.randn(4, 5) * 10, torch.randn(4, 5) * 3),
    ),
    "remainder_fmod_int": (
        lambda a, b: (
            torch.remainder(a, b),
            torch.fmod(a, b),
            torch.floor_divide(a, b),
            torch.div(a, b, rounding_mode="trunc"),
        ),
        lambda: (_ints(6, 5), _nonzero_ints(6, 5)),
    ),
    "rounding": (
        lambda x: (x.floor(), x.ceil(), x.round(), x.trunc(), x.frac(), x.sign(), x.signbit()),
        lambda: (_halves(),),
    ),
    "predicates": (
        lambda x: (x.isnan(), x.isinf(), x.isfinite(), x.sign()),
        lambda: (_specials(),),
    ),
    "where_clamp_minmax": (
        lambda x, y: (
            torch.where(x > 0, x, y).clamp(-0.5, 0.7),
            x.clamp(min=y),
            torch.maximum(x, y),
            torch.minimum(x, y.nan_to_num()),
        ),
        lambda: (
            torch.randn(4, 5),
            torch.where(torch.rand(4, 5) < 0.2, float("nan"), torch.randn(4, 5)),
        ),
    ),
    "activations": (
        lambda x: (
            x.sigmoid(),
            F.gelu(x, approximate="tanh"),
            F.gelu(x),
            F.silu(x),
            F.softplus(x),
            F.elu(x),
            F.leaky_relu(x),
            F.hardtanh(x),
        ),
        lambda: (torch.randn(4, 5) * 3,),
    ),
    "bitwise_int32": (
        lambda a, b: (a & b, a | b, a ^ b, ~a, a << (b & 7), a >> (b & 7)),
        lambda: (
            _ints(4, 5, lo=-1000, hi=1000, dtype=torch.int32),
            _ints(4, 5, lo=0, hi=100, dtype=torch.int32),
        ),
    ),
    "logical_bool": (
        lambda a, b: (a & b, a | b, a ^ b, ~a, torch.logical_xor(a, b), a.sum()),
        lambda: (torch.rand(4, 5) > 0.5, torch.rand(4, 5) > 0.5),
    ),
    # casts: float -> int truncates, anything -> bool is != 0, bfloat16/float16 round to nearest
    "casts": (
        lambda x, i, b: (
            x.to(torch.int32),
            x.to(torch.int64),
            x.to(torch.bool),
            b.to(torch.float32),
            b.to(torch.int32),
            i.to(torch.bfloat16),
            i.to(torch.float16),
            x.to(torch.bfloat16),
            x.to(torch.float16).to(torch.bfloat16),
            x.to(torch.bfloat16).to(torch.int64),
        ),
        lambda: (torch.randn(4, 5) * 100, _ints(4, 5, lo=-3000, hi=3000), torch.rand(4, 5) > 0.5),
    ),
    # reductions: first index of ties, any/all, prod; persistent and looped rows
    "arg_reductions_ties": (
        lambda x: (x.argmax(1), x.argmin(1), x.argmax(0), x.max(1), x.min(0)),
        lambda: (torch.randint(0, 3, (3, 1500)).float(),),
    ),
    "any_all_prod": (
        lambda x: (
            (x > 2).any(1),
            (x > -2).all(1),
            _signs_and_twos(x).prod(1),
            _signs_and_twos(x).sum(),
        ),
        lambda: (torch.randn(5, 1200),),
    ),
    "welford": (
        lambda x: (*torch.var_mean(x, 1), x.std(0), F.layer_norm(x, (x.shape[1],))),
        lambda: (torch.randn(6, 1100) + 50,),
    ),
    "int_reductions": (
        lambda a: (a.sum(1), a.amax(1), a.amin(0), a.prod(0), a.argmax(1)),
        lambda: (_ints(4, 9, lo=-3, hi=4, dtype=torch.int32),),
    ),
    # indexing: wrapped negative indices, gathers with bounds, scatters with repeated indices
    "index_gather": (
        lambda x, i, g: (x[i], x[:, i], torch.gather(x, 1, g), F.embedding(i.abs() % 5, x)),
        lambda: (torch.randn(5, 6), torch.tensor([0, -1, 3, -5, 2]), torch.randint(0, 6, (5, 4))),
    ),
    "index_put_accumulate": (
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (torch.randn(5, 3), torch.tensor([0, 2, 2, -1, 2]), torch.randn(5, 3)),
    ),
    "index_put_accumulate_2d": (
        lambda x, i, j, v: x.index_put((i, j), v, accumulate=True),
        lambda: (_ints(4, 3), torch.tensor([1, 1, 3, 1]), torch.tensor([0, 0, 2, 0]), _ints(4)),
    ),
    "index_put_accumulate_half": (
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (
            torch.randn(4, 3, dtype=torch.float16),
            torch.tensor([3, 3, 0]),
            torch.randn(3, 3, dtype=torch.float16),
        ),
    ),
    "index_put_assign": (
        lambda x, i, v: x.index_put((i,), v),
        lambda: (torch.randn(6, 3), torch.tensor([4, 0, 2]), torch.randn(3, 3)),
    ),
    "scatter_add_and_scatter": (
        lambda x, i, p, s: (x.scatter_add(1, i, s), x.scatter(1, p, s), x.scatter(1, p, 2.5)),
        lambda: (
            torch.randn(3, 5),
            torch.randint(0, 5, (3, 4)),
            torch.stack([torch.randperm(5)[:4] for _ in range(3)]),
            torch.randn(3, 4),
        ),
    ),
}


def _fallbacks_of_cpp(fn, args) -> set[str]:
    """The aten fallbacks of the graph lowered for the C++ generator (no compiler run)."""
    return set(generate(aten_graph(fn, *args), list(args), parse_options({})).artifact.fallbacks)


@pytest.mark.parametrize("case", CASES)
def test_op_matches_eager_and_lowers_whatever_cpp_lowers(case):
    fn, make = CASES[case]
    args = make()
    compiled = check(fn, *args, **TRITON)
    assert compiled.artifact.triton is not None
    assert set(compiled.fallbacks) <= _fallbacks_of_cpp(fn, args), compiled.fallbacks


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_math_computes_in_float32(dtype):
    def fn(x, y):  # one op per output: eager rounds after each op
        return x.erfinv(), x.log1p(), x.atan2(y), x.pow(y), x.tanh(), x.lgamma(), x.remainder(y)

    x = (torch.rand(4, 6) * 1.8 - 0.9).to(dtype)
    y = (torch.randn(4, 6) + 3).to(dtype)
    compiled = check(fn, x, y, **TRITON)
    assert compiled.fallbacks == {}


def test_rand_and_randn_are_philox_in_the_kernel():
    x = torch.empty(128, 64)
    compiled = compile_fn(lambda a: (torch.rand_like(a), torch.randn_like(a)), x, **TRITON)
    assert compiled.fallbacks == {}
    source = compiled.artifact.triton.source
    assert "tl.rand(" in source and "tl.randn(" in source
    (u, n), (u2, _) = compiled(x), compiled(x)
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.03
    assert abs(n.mean()) < 0.06 and abs(n.std() - 1) < 0.06
    assert not torch.equal(u, u2)  # a new seed per call


def test_dropout_mask_and_output_agree():
    x = torch.randn(32, 32) + 3
    compiled = compile_fn(lambda a: torch.ops.aten.native_dropout(a, 0.25, True), x, **TRITON)
    assert compiled.fallbacks == {}
    out, mask = compiled(x)
    torch.testing.assert_close(out, torch.where(mask, x / 0.75, torch.zeros_like(x)))
    assert 0.65 < mask.float().mean() < 0.85


def test_fallback_random_swaps_philox_for_eager_numbers():
    x = torch.randn(16, 16)

    def fn(a):
        return torch.ops.aten.native_dropout(a, 0.5, True), torch.rand_like(a) + a

    assert compile_fn(fn, x, **TRITON).fallbacks == {}
    compiled = compile_fn(fn, x, fallback_random=True, **TRITON)
    torch.manual_seed(7)
    expected = fn(x)
    torch.manual_seed(7)
    actual = compiled(x)
    torch.testing.assert_close(list(actual), [*expected[0], expected[1]])
    assert "fallback_random=True" in compiled.artifact.output_code()


def test_what_triton_cannot_express_runs_as_listed_aten_fallbacks():
    def fn(x, i, v, d):
        return x.index_put((i,), v, accumulate=True), d.exp() + 1

    args = [
        torch.randn(4, 3, dtype=torch.bfloat16),
        torch.tensor([1, 1, 3]),
        torch.randn(3, 3, dtype=torch.bfloat16),
        torch.randn(5, dtype=torch.float64),
    ]
    compiled = check(fn, *args, **TRITON)
    code = compiled.artifact.output_code()
    assert (
        "aten.index_put.default: the triton code generator has no atomic add of torch.bfloat16"
        in code
    )
    assert "aten.exp.default: dtype torch.float64 has no triton lowering" in code


class _Block(torch.nn.Module):
    """Token embedding, LayerNorm, single-head softmax attention and a GELU MLP: what a
    transformer trains (the embedding's backward is an accumulating scatter)."""

    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(), torch.nn.Linear(2 * dim, dim)
        )

    def forward(self, tokens):
        x = self.embed(tokens)
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.proj(attn @ v)
        return x + self.mlp(self.norm2(x))


def test_transformer_block_training_step_matches_eager_without_fallbacks(caplog):
    from torchkiln import logs

    torch.manual_seed(0)
    model = _Block(16, 8)
    tokens, target = torch.tensor([[1, 5, 5, 2, 9], [0, 5, 3, 3, 15]]), torch.randn(2, 5, 8)

    def step(m):
        loss = F.mse_loss(m(tokens), target)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        return loss, grads

    expected_loss, expected_grads = step(model)
    logs.set_logs("output_code")
    try:
        with caplog.at_level("INFO", logger="torchkiln"):
            # explicit attention kept: SDPA would be an aten call (test_fuse_attention.py)
            options = {**TRITON, "fuse_attention": False}
            loss, grads = step(torchkiln.compile(model, backend="inductor", options=options))
    finally:
        logs.set_logs("")
    torch.testing.assert_close(loss, expected_loss)
    torch.testing.assert_close(grads, expected_grads)
    assert caplog.text.count("# fallbacks to aten (0)") == 2  # forward and backward graphs


#: the default OpInfo subset: PyTorch's own sample inputs for the ops of this file's concerns
SWEEP_OPS = [
    "atan2",
    "pow",
    "remainder",
    "floor_divide",
    "erfinv",
    "index_put",
    "scatter_add",
    "var_mean",
]


def test_opinfo_sweep_through_triton():
    pytest.importorskip(
        "expecttest", reason="OpInfo needs expecttest (pip install 'torchkiln[test]')"
    )
    from opinfo_sweep import sweep

    result = sweep(None if FULL else SWEEP_OPS, cpu_backend="triton")
    lowered = sorted(set(result.passed) - result.fallback_only)
    print(f"\n{len(result.passed)} ops match eager through Triton, {len(lowered)} without fallback")
    failures = "\n".join(f"{op} {dtype}: {why}" for (op, dtype), why in result.failed.items())
    assert not result.failed, failures
    assert FULL or set(SWEEP_OPS) <= set(result.passed)
