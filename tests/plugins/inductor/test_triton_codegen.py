"""The Triton generator, run on CPU tensors by Triton's interpreter (``cpu_backend="triton"``).

Shapes are tiny: the interpreter runs every program of the grid in numpy.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import check, compile_fn, kernel_count, needs_interpreter

import torchkiln
from torchkiln_inductor.codegen.triton import (
    _BINARY_SAME,
    _COMPARE,
    _UNARY_FLOAT,
    TL_TYPES,
    TritonOpsHandler,
)
from torchkiln_inductor.device import TRITON as TRITON_CAPS

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = needs_interpreter

TRITON = {"cpu_backend": "triton"}


def triton_check(fn, *args, **kwargs):
    compiled = check(fn, *args, **TRITON, **kwargs)
    assert compiled.artifact.triton is not None and compiled.artifact.cpp_source == ""
    return compiled


def test_pointwise_chain_with_broadcast_transpose_and_slice():
    def fn(x, y, b):
        t = x.t()[1:5] * y[:, ::2] + b
        return torch.relu(t).sigmoid() - torch.exp(t) / 3, (x + 1).transpose(0, 1)

    triton_check(fn, torch.randn(12, 6), torch.randn(4, 24), torch.randn(12))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool]
)
def test_dtypes(dtype):
    def fn(a, b):
        if dtype == torch.bool:
            return a & ~b, a | b
        if dtype.is_floating_point:  # one op per output: eager rounds after each op
            return a * b, a - b, torch.maximum(a, b), (a > b), a.float().exp(), b.to(torch.int32)
        return a * b - a // (b.abs() + 1), a % (b.abs() + 1), torch.where(a > b, a, b)

    if dtype == torch.bool:
        args = [torch.rand(5, 7) > 0.5, torch.rand(5, 7) > 0.5]
    elif dtype.is_floating_point:
        args = [torch.randn(5, 7, dtype=dtype), torch.randn(5, 7, dtype=dtype)]
    else:
        args = [torch.randint(-50, 50, (5, 7), dtype=dtype) for _ in range(2)]
    triton_check(fn, *args)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.sum(1),
        lambda x: x.mean(0),
        lambda x: x.amax(1),
        lambda x: x.amin(-1),
        lambda x: x.prod(1),
        lambda x: x.argmax(1),
        lambda x: x.argmin(0),
        lambda x: x.var(1),
        lambda x: x.std(0, correction=0),
        lambda x: x.sum(),
        lambda x: torch.softmax(x, -1),
        lambda x: torch.log_softmax(x, 0),
        lambda x: F.layer_norm(x, x.shape[-1:]),
    ],
    ids=[
        "sum",
        "mean",
        "amax",
        "amin",
        "prod",
        "argmax",
        "argmin",
        "var",
        "std",
        "sum_all",
        "softmax",
        "log_softmax",
        "layer_norm",
    ],
)
@pytest.mark.parametrize("shape", [(6, 20), (3, 5000)], ids=["persistent", "looped"])
def test_reductions(fn, shape):
    # away from zero: a sum of 5000 terms near 0 cancels, and the interpreter adds its
    # 4096 lanes one after another (a GPU uses a tree), so rounding would exceed the tolerance
    triton_check(fn, torch.randn(shape) + 2)


def test_sum_down_columns_takes_wide_short_tiles():
    """A bias gradient (a sum over rows): each tile row is a coalesced read of 64 columns,
    not a program per column reading one element per row."""
    compiled = triton_check(lambda x: x.sum(0), torch.randn(300, 8192))
    (launch,) = compiled.artifact.triton.launches
    assert dict(launch.meta) == {"XBLOCK": 64, "RBLOCK0": 64}


def test_sum_down_few_columns_takes_narrower_taller_tiles():
    """96 columns in tiles of 64 would be 2 programs looping down 300 rows: 8 columns (a
    32-byte sector of float32) a program keep 12 busy, each reading its rows at once."""
    compiled = triton_check(lambda x: x.sum(0), torch.randn(300, 96))
    (launch,) = compiled.artifact.triton.launches
    assert dict(launch.meta) == {"XBLOCK": 8, "RBLOCK0": 512}


def test_welford_down_columns_loops_over_half_height_tiles():
    """Variance down columns keeps a mean, a sum of squares and a count per lane: its tiles
    are half as tall as a sum's (registers, not memory, bound it), and it matches eager."""
    compiled = triton_check(
        lambda x: torch.var_mean(x, 0, correction=0), torch.randn(600, 8192), rtol=1e-4, atol=1e-4
    )
    (launch,) = compiled.artifact.triton.launches
    assert dict(launch.meta) == {"XBLOCK": 64, "RBLOCK0": 32}


def test_sum_into_few_outputs_splits_into_parallel_chunks():
    """96 sums over 5000 rows would be 2 programs of 64 columns: the rows split into chunks
    of 128, each a program, then the chunks' sums are added."""
    compiled = triton_check(lambda x: x.sum(0), torch.randn(5000, 96) + 1, rtol=1e-4, atol=1e-3)
    assert len(compiled.artifact.triton.launches) == 2
    assert "(39, 96)" in compiled.artifact.wrapper_source


def _statistics_error(fn, x):
    """The float32 results' errors against float64: (kiln's, eager's)."""
    compiled = triton_check(fn, x, rtol=1e-5, atol=1e-5)
    reference = [r.double() for r in fn(x.double())]
    kiln, eager = compiled(x), fn(x)
    worst = [
        max(((a.double() - r).norm() / r.norm()).item() for a, r in zip(out, reference))
        for out in (kiln, eager)
    ]
    return compiled, *worst


def test_batch_norm_statistics_split_into_equal_chunks_combined_exactly():
    """Batch norm's var_mean over (N, H, W) gives each of few channels 16384 elements: they
    split into 128 chunks of 128 (one program each), whose means and m2s combine (Chan)."""
    torch.manual_seed(0)
    x = 3 + 0.1 * torch.randn(256, 4, 8, 8)  # far from zero: a naive combination loses digits

    def stats(x):
        return torch.var_mean(x, dim=(0, 2, 3), correction=0)

    compiled, kiln_error, eager_error = _statistics_error(stats, x)
    assert "(128, 4)" in compiled.artifact.wrapper_source  # the chunks' partial results
    assert kiln_error <= 2 * max(eager_error, 2**-24)


def test_statistics_over_a_prime_count_stay_one_reduction():
    """16411 rows have no equal chunks: the reduction stays whole, and right."""
    torch.manual_seed(0)
    x = 3 + 0.1 * torch.randn(16411, 4)
    compiled, kiln_error, eager_error = _statistics_error(lambda x: torch.var_mean(x, 0), x)
    assert len(compiled.artifact.triton.launches) == 1
    assert kiln_error <= 2 * max(eager_error, 2**-24)


def test_independent_reductions_stay_separate_kernels():
    """On a GPU, fusing two kernels that share nothing would run both in each program, one
    after the other: they stay separate (the C++ generator fuses them: one loop pass)."""

    def fn(a, b):
        return a.sum(1), b.sum(1)

    compiled = triton_check(fn, torch.randn(8, 40), torch.randn(8, 40))
    (launch,) = compiled.artifact.triton.launches  # the same kernel: one function, run twice
    assert compiled.artifact.wrapper_source.count(f"{launch.name}(") == 2
    assert kernel_count(check(fn, torch.randn(8, 40), torch.randn(8, 40))) == 1


def test_buffer_lowering_made_and_left_unread_gets_no_kernel():
    """Functionalized ``z.as_strided(...).copy_(y)`` realizes the zeros for a view that
    ``copy`` never reads: that kernel writes nothing anyone reads (ConvNeXt's backward has
    one), and a Triton kernel without arguments can't be launched on a GPU."""

    def fn(x):  # as the AOT layer functionalizes it
        aten, prims = torch.ops.aten, torch.ops.prims
        zeros = aten.new_zeros(x, [256])
        copied = aten.copy(aten.as_strided(zeros, (2, 128), (128, 1)), x * 2)
        return prims.as_strided_scatter(zeros, copied, (2, 128), (128, 1), 0) + 1

    compiled = triton_check(fn, torch.randn(2, 128))
    assert all(launch.params for launch in compiled.artifact.triton.launches)


def test_sum_along_rows_takes_whole_rows():
    # a long row per program, 8 elements a thread; short rows several per program, 32 elements
    # of the tile a thread (codegen/triton.py's TILE_PER_THREAD says why)
    compiled = triton_check(lambda x: x.sum(1), torch.randn(96, 300))
    (launch,) = compiled.artifact.triton.launches
    assert (dict(launch.meta), launch.num_warps) == ({"XBLOCK": 1, "RBLOCK0": 512}, 2)
    compiled = triton_check(lambda x: x.sum(1), torch.randn(96, 100))
    (launch,) = compiled.artifact.triton.launches
    assert (dict(launch.meta), launch.num_warps) == ({"XBLOCK": 32, "RBLOCK0": 128}, 4)


def test_convolutions_run_channels_last_as_cudnn_prefers():
    x, w1, w2 = torch.randn(2, 3, 9, 9), torch.randn(8, 3, 3, 3), torch.randn(8, 8, 1, 1)

    def fn(x, w1, w2):
        y = torch.ops.aten.convolution(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        z = torch.ops.aten.convolution(y.relu(), w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        return y, z + 1

    compiled = triton_check(fn, x, w1, w2, rtol=1e-5, atol=1e-5)
    assert "(648, 1, 72, 8)" in compiled.artifact.output_code()  # y, channels-last inside
    assert all(out.is_contiguous() for out in compiled(x, w1, w2))


def test_transposed_product_for_a_matmul_is_stored_in_read_order():
    """``(x * g).t() @ w``: the product is stored transposed (the matmul takes any strides),
    so its kernel reads and writes in the same order instead of reading across rows."""
    compiled = triton_check(
        lambda x, g, w: (x * g).t() @ w,
        *(torch.randn(64, 48), torch.randn(64, 48), torch.randn(64, 16)),
        rtol=1e-4,
        atol=1e-4,
    )
    assert "_empty((48, 64), (1, 48)" in compiled.artifact.wrapper_source


def test_cnn_training_step_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 1, stride=2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )
    twin = copy.deepcopy(model)
    x = torch.randn(2, 3, 12, 12)
    compiled = torchkiln.compile(model, backend="inductor", options=TRITON)(x)
    expected = twin(x)
    torch.testing.assert_close(compiled, expected, rtol=1e-4, atol=1e-4)
    compiled.square().mean().backward()
    expected.square().mean().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)


def _chain(x, w, b):
    return torch.softmax(F.layer_norm(F.gelu(x * w + b), x.shape[-1:]), -1)


def test_persistent_chain_keeps_rows_in_registers():
    """Whole rows fit one block: gelu's values, the centred values and the exponentials stay
    in registers between the three reductions; the kernel reads x once and writes once."""
    compiled = triton_check(_chain, torch.randn(5, 48), torch.randn(48), torch.randn(48))
    source = compiled.artifact.triton.source
    assert source.count("tl.store(") == 1 and source.count("in_ptr0 +") == 1, source


def test_looped_chain_writes_and_rereads_its_rows():
    compiled = triton_check(_chain, torch.randn(2, 5000), torch.randn(5000), torch.randn(5000))
    assert compiled.artifact.triton.source.count("tl.store(") == 4


def test_reduction_of_half_precision_with_epilogue():
    def fn(x, w, b):
        return F.layer_norm(F.gelu(x * w + b), (32,)).softmax(-1)

    args = [torch.randn(4, 32, dtype=torch.bfloat16), *torch.randn(2, 32, dtype=torch.bfloat16)]
    compiled = compile_fn(fn, *args, **TRITON)
    # the fused kernel keeps float32 between ops, as eager does on float32 inputs; the
    # outputs (softmax, at most 1) may differ by one bfloat16 step of 1.0 (0.0078)
    expected = fn(*[a.float() for a in args]).to(torch.bfloat16)
    torch.testing.assert_close(compiled(*args)[0], expected, atol=8e-3, rtol=1.6e-2)


def test_mlp_training_step_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )
    reference = [p.detach().clone() for p in model.parameters()]

    def step(m, x, y):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss

    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    expected = step(model, x, y)
    grads = [p.grad.clone() for p in model.parameters()]
    with torch.no_grad():
        for p, r in zip(model.parameters(), reference):
            p.copy_(r)
            p.grad = None
    compiled = torchkiln.compile(model, backend="inductor", options=TRITON)
    actual = step(compiled, x, y)
    torch.testing.assert_close(actual, expected)
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def test_cpu_backend_option_is_checked():
    with pytest.raises(Exception, match="cpu_backend"):
        compile_fn(lambda x: x + 1, torch.randn(3), cpu_backend="cuda")


def test_triton_generator_emits_every_op_and_dtype_its_capabilities_declare():
    def emits(name):
        return (
            name in _UNARY_FLOAT
            or name in _BINARY_SAME
            or name in _COMPARE
            or hasattr(TritonOpsHandler, name)
        )

    assert {n for n in TRITON_CAPS.ops if not emits(n)} == set()
    assert TRITON_CAPS.dtypes <= set(TL_TYPES)


def test_large_pointwise_does_not_join_a_few_outputs_kernel():
    """A normalization's output (1M elements) and a per-channel update (64 values) both read
    the channel statistics. Fused, the big node's loop would split into 64 rows of 16384,
    one program each (ResNet-18's batch norms on the H100: 1.3 ms instead of ~0.1); it runs
    in its own kernel, over many programs."""

    def fn(x, mean, running):
        return (x - mean) * 2, running * 0.9 + mean * 0.1

    compiled = triton_check(fn, torch.randn(16384, 64), torch.randn(64), torch.randn(64))
    launches = compiled.artifact.triton.launches
    assert len(launches) == 2
    assert max(math.prod(launch.grid) for launch in launches) >= 16384 * 64 // 4096


def test_independent_tiny_kernels_share_a_launch():
    """Loops one program covers fuse though they share nothing (a ResNet's 20
    ``num_batches_tracked += 1``); larger independent loops stay apart, side by side on a GPU."""

    def counters_and_big(a, b, c, x, y):
        return a + 1, b + 1, c * 2, x.sin(), y.cos()

    scalars = [torch.tensor(3), torch.tensor(5), torch.tensor(1.5)]
    compiled = triton_check(counters_and_big, *scalars, torch.randn(4096), torch.randn(4096))
    sizes = sorted(launch.xnumel for launch in compiled.artifact.triton.launches)
    assert sizes == [1, 4096, 4096]


def test_layers_of_the_same_sizes_share_one_function():
    """A kernel's text names its params by position (``in_ptr0``), not by buffer: the same
    softmax before and after a matmul is one function, compiled once; a float16 one of
    other rows is another."""

    def fn(x, w, h):
        y = torch.softmax(x, -1) @ w
        return torch.softmax(y, -1), torch.softmax(h, -1)

    x, w, h = torch.randn(8, 16), torch.randn(16, 16), torch.randn(4, 16, dtype=torch.float16)
    compiled = triton_check(fn, x, w, h, rtol=1e-3, atol=1e-3)
    names = [launch.name for launch in compiled.artifact.triton.launches]
    assert len(names) == len(set(names)) == 2  # float32's softmax, float16's
    wrapper = compiled.artifact.wrapper_source
    assert sorted(wrapper.count(f"{name}(") for name in names) == [1, 2]
    assert "in_ptr0" in compiled.artifact.triton.source
