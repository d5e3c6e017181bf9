"""Lowerings whose behaviour the OpInfo sweep does not pin down: dtypes, random ops, indexing."""

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import aten_graph, check, compile_fn, kernel_count, live_storages
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln_inductor import graph as graph_module
from torchkiln_inductor.compile_fx import _device, compile_fx
from torchkiln_inductor.options import parse_options


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_float_dtypes_compute_and_store_correctly(dtype):
    x = torch.randn(33, 65).to(dtype)
    check(
        lambda a: (a.exp() * 2 - a).sum(-1),
        x,
        rtol=2e-2 if dtype != torch.float64 else None,
        atol=2e-2 if dtype != torch.float64 else None,
    )


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_integer_and_bool_dtypes(dtype):
    x = torch.randint(0, 5, (17, 9)).to(dtype)
    check(lambda a: (a * a, a.sum(0), a.max(1).values, a == 2), x)


def test_integer_floor_division_and_remainder_follow_python():
    a = torch.tensor([-7, 7, -7, 7, 0])
    b = torch.tensor([2, -2, -2, 2, 3])
    check(lambda x, y: (torch.div(x, y, rounding_mode="floor"), torch.remainder(x, y)), a, b)


def test_argmax_takes_first_of_ties_and_nan_wins():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0] * 5, [float("nan"), 1.0, float("nan"), 5.0] * 5])
    check(lambda a: (a.argmax(-1), a.argmin(-1), a.amax(-1)), x)


def test_welford_variance_of_large_offset_values_is_accurate():
    x = torch.randn(8, 1000, dtype=torch.float32) + 1000.0
    check(lambda a: torch.var_mean(a, -1), x, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n", [7, 64, 1000])
def test_welford_lane_merge_matches_eager_with_offsets_nan_and_inf(n):
    # n: tail only, whole lane blocks, blocks and a tail; rows 1-3 hold a NaN, an inf, a -inf
    x = torch.randn(6, n) * torch.tensor([1.0, 1.0, 1.0, 1.0, 1e-3, 50.0])[:, None]
    x += torch.tensor([0.0, 0.0, 0.0, 0.0, 1e4, -3e3])[:, None]
    x[1, n // 2], x[2, 0], x[3, n - 1] = float("nan"), float("inf"), float("-inf")
    check(lambda a: torch.var_mean(a, -1), x, rtol=1e-4, atol=1e-4)


def test_float_erf_keeps_sign_nan_and_saturates_like_eager():
    special = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 3.9, -4.0, 4.5, -1e30, 1e-30]
    x = torch.cat([torch.tensor(special), torch.linspace(-6, 6, 1001)])
    compiled = check(lambda a: (torch.erf(a), F.gelu(a[2:])), x, rtol=0, atol=1e-6)
    erf = compiled(x)[0]
    assert torch.equal(torch.signbit(erf[1:10]), torch.signbit(torch.erf(x[1:10])))  # +-0 too
    # gelu(+inf) is left out above: eager gives inf with AVX2 and NaN with AVX-512 (torch 2.11);
    # ours follows the formula x/2 * (1 + erf(x/sqrt(2))) = inf on both
    inf = torch.tensor([float("inf")])
    assert compile_fn(F.gelu, inf)(inf)[0].item() == float("inf")


def test_eval_batch_norm_is_one_fused_kernel_with_its_relu():
    x, w, b, mean = torch.randn(4, 6, 5, 7), torch.randn(6), torch.randn(6), torch.randn(6)
    var = torch.rand(6)
    x[0, 0, 0, 0] = float("nan")

    def fn(x, w, b, mean, var):
        out = torch.ops.aten._native_batch_norm_legit(x, w, b, mean, var, False, 0.1, 1e-5)[0]
        return out.relu()

    compiled = check(fn, x, w, b, mean, var)
    assert not compiled.fallbacks
    assert kernel_count(compiled) == 2  # per-channel scale and shift, then the elementwise pass


def test_convolutions_run_channels_last_and_outputs_keep_eager_strides():
    x, w1, w2 = torch.randn(2, 3, 9, 9), torch.randn(8, 3, 3, 3), torch.randn(8, 8, 1, 1)

    def fn(x, w1, w2):
        y = torch.ops.aten.convolution(x, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        z = torch.ops.aten.convolution(y.relu(), w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
        return y, z + 1

    compiled = check(fn, x, w1, w2, rtol=1e-5, atol=1e-5)
    assert "(648, 1, 72, 8)" in compiled.artifact.output_code()  # y, channels-last inside
    assert all(out.is_contiguous() for out in compiled(x, w1, w2))


def test_convolution_backward_runs_channels_last_and_gradients_match_eager():
    grad, x, w = torch.randn(2, 8, 9, 9), torch.randn(2, 3, 9, 9), torch.randn(8, 3, 3, 3)

    def fn(grad, x, w):
        gx, gw, _ = torch.ops.aten.convolution_backward(
            grad.relu(), x, w, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False]
        )
        return gx * 2, gw

    compiled = check(fn, grad, x, w, rtol=1e-4, atol=1e-4)
    assert "(243, 1, 27, 3)" in compiled.artifact.output_code()  # grad_input channels-last
    assert all(out.is_contiguous() for out in compiled(grad, x, w))


def test_saved_outputs_keep_the_channels_last_layout():
    """Outputs past ``num_user_outputs`` are saved for backward: no copy back to eager strides."""
    x, w = torch.randn(2, 3, 9, 9), torch.randn(8, 3, 3, 3)

    def fn(x, w):
        y = torch.ops.aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return y.sum(), y

    gm = aten_graph(fn, x, w)
    gm.meta["num_user_outputs"] = 1
    total, saved = compile_fx(gm, [x, w], parse_options({}))(x, w)
    torch.testing.assert_close(saved, fn(x, w)[1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(total, fn(x, w)[0], rtol=1e-4, atol=1e-3)
    assert saved.is_contiguous(memory_format=torch.channels_last) and not saved.is_contiguous()


def test_views_of_an_extern_result_follow_its_real_strides():
    """The fake kernel predicts attention's output layout from its input's (transposed) strides;
    the real kernel gets our contiguous buffer and answers contiguous. The view of its result
    that feeds mm must index the real strides (it read garbage before)."""

    def fn(x, wq, w):
        q = (x @ wq).view(2, 64, 4, 32).transpose(1, 2) * 2
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return out.transpose(1, 2).reshape(128, 128) @ w

    check(
        fn, torch.randn(128, 128), torch.randn(128, 128), torch.randn(128, 16), rtol=1e-4, atol=1e-4
    )


def test_views_of_computed_values_compose_index_functions():
    check(
        lambda a: (a + 1).view(4, 6, 5).permute(2, 0, 1).reshape(30, 4)[::2, 1:] * 3,
        torch.randn(24, 5),
    )


def test_as_strided_of_an_input_is_a_view():
    compiled = check(lambda a: torch.as_strided(a, (3, 3), (1, 3), 2), torch.randn(20))
    assert kernel_count(compiled) == 0


def test_embedding_gathers_rows():
    check(lambda w, i: F.embedding(i, w) * 2, torch.randn(10, 4), torch.tensor([[1, 9], [0, 0]]))


def test_negative_indices_wrap_around():
    check(lambda x, i: x[i], torch.randn(6, 3), torch.tensor([-1, 0, -6]))


def test_index_put_accumulates_duplicates():
    check(
        lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
        torch.zeros(5, 2),
        torch.tensor([1, 1, 4, 1]),
        torch.ones(4, 2),
    )


def test_scatter_add_accumulates():
    check(
        lambda x, i, s: x.scatter_add(0, i, s),
        torch.zeros(3, 4),
        torch.tensor([[0, 1, 2, 0], [0, 0, 0, 0]]),
        torch.randn(2, 4),
    )


@pytest.mark.parametrize("n", [64, 4096])
def test_long_scatters_with_repeated_indices_keep_every_update(n):
    """Loops long enough for gcc to vectorize: a vectorized scatter would drop repeated updates."""
    index = torch.randint(0, 8, (n,))
    check(
        lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True) * 2,
        torch.zeros(8),
        index,
        torch.randn(n),
    )
    check(lambda x, i, s: x.scatter_add(0, i, s) + 1, torch.zeros(8), index, torch.randn(n))


@pytest.mark.parametrize("exponent", [2, 3, -1, 0.5, 1.7])
def test_pow_by_a_constant_matches_eager(exponent):
    check(lambda x: torch.pow(x, exponent) * 2, torch.rand(4096) + 0.1)


def test_gelu_tanh_cube_is_multiplied_out_so_the_loop_vectorizes():
    """GPT-2's gelu: ``x ** 3`` as x*x*x, not a pow() call that kept the loop scalar."""
    compiled = check(
        lambda x: 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * torch.pow(x, 3.0)))),
        torch.randn(64, 512),
    )
    assert "std::pow" not in compiled.artifact.cpp_source


def test_cat_and_pad_use_masked_loads_in_one_kernel():
    compiled = check(
        lambda a, b: F.pad(torch.cat([a, b * 2], 1), (1, 2, 0, 1), value=-1.0),
        torch.randn(4, 3),
        torch.randn(4, 5),
    )
    assert kernel_count(compiled) == 1


def test_full_and_arange_are_computed_in_kernels():
    check(
        lambda x: x + torch.arange(0, 10, 2, dtype=torch.float32) + torch.full((5,), 3.0),
        torch.randn(5),
    )


def test_random_values_are_seeded_by_torch_manual_seed():
    compiled = compile_fn(lambda x: torch.rand_like(x) + torch.randn_like(x) * 0, torch.empty(1000))
    torch.manual_seed(3)
    first = compiled(torch.empty(1000))[0]
    second = compiled(torch.empty(1000))[0]
    torch.manual_seed(3)
    again = compiled(torch.empty(1000))[0]
    torch.testing.assert_close(first, again)
    assert not torch.equal(first, second)
    assert first.min() >= 0 and first.max() < 1 and abs(first.mean() - 0.5) < 0.05


def test_randn_has_unit_variance():
    compiled = compile_fn(lambda x: torch.randn_like(x), torch.empty(20000))
    out = compiled(torch.empty(20000))[0]
    assert abs(out.mean()) < 0.05 and abs(out.std() - 1) < 0.05


def test_dropout_mask_and_output_agree():
    x = torch.randn(64, 64) + 3
    compiled = compile_fn(lambda a: torch.ops.aten.native_dropout(a, 0.25, True), x)
    out, mask = compiled(x)
    torch.testing.assert_close(out, torch.where(mask, x / 0.75, torch.zeros_like(x)))
    assert 0.65 < mask.float().mean() < 0.85


def test_fallback_random_matches_eager_exactly():
    x = torch.randn(32, 32)
    fn = lambda a: torch.ops.aten.native_dropout(a, 0.5, True)  # noqa: E731
    compiled = compile_fn(fn, x, fallback_random=True)
    torch.manual_seed(7)
    expected = fn(x)
    torch.manual_seed(7)
    actual = compiled(x)
    torch.testing.assert_close(list(actual), list(expected))
    assert "fallback_random=True" in compiled.artifact.output_code()


def test_op_without_lowering_runs_as_aten_call():
    compiled = check(lambda x: torch.cumsum(x.exp(), 0) * 2, torch.randn(7, 3))
    assert compiled.fallbacks == {"aten.cumsum.default": "no lowering"}


@pytest.mark.parametrize(
    "dim, start, end, step",
    [(1, 1, None, 2), (1, 3, 8, 3), (-1, -5, None, 2), (0, 1, 5, 4), (2, 2, 7, 2), (1, 0, 6, 5)],
)
def test_strided_slice_scatter_matches_eager(dim, start, end, step):
    """Starts that are not a multiple of the step (Swin's patch merging, ``x[:, 1::2]``)."""
    x = torch.randn(5, 8, 9)
    src = torch.randn_like(x[(slice(None),) * (dim % 3) + (slice(start, end, step),)])

    def fn(x, src):
        return torch.ops.aten.slice_scatter(x * 2, src + 1, dim, start, end, step)

    assert not check(fn, x, src).fallbacks


@torch.library.custom_op("kiln_test::scaled_and_rows", mutates_args=())
def _scaled_and_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    return x * 2, x.shape[0]


@_scaled_and_rows.register_fake
def _(x):
    return torch.empty_like(x), x.shape[0]


def test_an_aten_call_returning_numbers_beside_tensors_runs():
    """Ops such as CUDA's cuDNN attention return ints (max sequence lengths) in their
    tuple; the graph uses them as the constants tracing saw."""

    def fn(x):
        y, rows = torch.ops.kiln_test.scaled_and_rows(x)
        return y + rows

    check(fn, torch.randn(3, 4))


def test_a_graph_without_tensor_inputs_runs_where_it_makes_its_tensors():
    """``torch.arange(n, device="cuda")`` has no tensor input: its kernels are chosen for the
    device of the tensors it makes (it used to get C++ kernels writing to GPU memory)."""
    gm = make_fx(lambda: torch.arange(5, device="cuda") * 2, tracing_mode="fake")()
    assert _device(gm, []) == torch.device("cuda", 0)


@torch.library.custom_op("kiln_test::needs_aligned_rows", mutates_args=())
def _needs_aligned_rows(x: torch.Tensor) -> torch.Tensor:
    if x.stride(0) % 4:
        raise RuntimeError(f"row stride {x.stride(0)} is not a multiple of 4")
    return x * 2


@_needs_aligned_rows.register_fake
def _(x):
    return torch.empty_like(x)


def test_stride_sensitive_aten_calls_get_the_strides_tracing_saw(monkeypatch):
    """The CUDA attention kernels check the alignment of their bias's strides, which eager
    pads for them (``pad`` then a slice): such calls get their arguments in those strides."""
    op = torch.ops.kiln_test.needs_aligned_rows.default
    monkeypatch.setattr(graph_module, "STRIDE_SENSITIVE", graph_module.STRIDE_SENSITIVE | {op})

    def fn(x):
        padded = F.pad(x * 3, (0, 1))[:, :3]  # rows of 3 in storage rows of 4, as eager pads
        return op(padded)

    check(fn, torch.randn(5, 3))


def _max_pool(kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    def fn(x):
        return torch.ops.aten.max_pool2d_with_indices(
            x, kernel, stride, padding, dilation, ceil_mode
        )

    return fn


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize(
    "pool, shape",
    [
        (_max_pool([3, 3], [2, 2], [1, 1]), (2, 4, 9, 9)),  # ResNet's stem
        (_max_pool([2, 2]), (2, 4, 8, 8)),
        (_max_pool([3, 2], [1, 2], [1, 0], [2, 1], True), (3, 7, 9)),  # dilated, ceil, no batch
    ],
)
def test_max_pool_values_and_indices_are_eager_s(pool, shape, cpu_backend, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if cpu_backend == "triton":
        pytest.importorskip("triton", reason="triton is not installed")
    x = torch.randn(shape)
    x.view(-1)[3] = float("nan")  # NaN wins its windows
    x.view(-1)[7:12] = float("-inf")
    compiled = check(pool, x, cpu_backend=cpu_backend)
    assert not compiled.fallbacks
    ties = torch.zeros(shape)  # the first max of a window wins
    check(pool, ties, cpu_backend=cpu_backend)


def test_max_pool_training_matches_eager_through_eager_s_backward():
    from torchkiln_inductor.backend import compile_graph

    def fn(x, w):
        y = F.conv2d(x, w, padding=1).relu()
        return (F.max_pool2d(y, 3, 2, 1) * 2,)

    x = torch.randn(2, 3, 10, 10, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    (out,) = compile_graph(torch.fx.symbolic_trace(fn), [x, w])(x, w)
    (expected,) = fn(x, w)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    grad = torch.randn_like(out)
    for a, e in zip(
        torch.autograd.grad(out, [x, w], grad), torch.autograd.grad(expected, [x, w], grad)
    ):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu_backend", ["cpp", "triton"])
@pytest.mark.parametrize(
    "shape, kernel, stride, padding, dilation, ceil_mode",
    [
        ((2, 4, 9, 9), [3, 3], [2, 2], [1, 1], [1, 1], False),  # ResNet's stem
        ((2, 3, 10, 10), [3, 3], [1, 1], [1, 1], [1, 1], False),  # overlapping windows
        ((3, 7, 9), [3, 2], [1, 2], [1, 0], [2, 1], True),  # dilated, ceil, no batch
        ((1, 2, 7, 7), [5, 5], [2, 2], [2, 2], [1, 1], False),
    ],
)
@pytest.mark.parametrize("ties", [False, True])
def test_max_pool_backward_is_eager_s(
    shape, kernel, stride, padding, dilation, ceil_mode, ties, cpu_backend, monkeypatch
):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if cpu_backend == "triton":
        pytest.importorskip("triton", reason="triton is not installed")
    aten = torch.ops.aten
    x = torch.zeros(shape) if ties else torch.randn(shape)  # ties: one element wins many windows
    out, indices = aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)

    def backward(grad, x, indices):
        return aten.max_pool2d_with_indices_backward(
            grad, x, kernel, stride, padding, dilation, ceil_mode, indices
        )

    compiled = check(backward, torch.randn_like(out), x, indices, cpu_backend=cpu_backend)
    assert not compiled.fallbacks


def test_a_residual_stream_is_stored_so_each_block_output_dies_young():
    """``h = h + block(h)`` read by the next block and the next add: inlined into both, each
    sum would keep every earlier block's output alive until the chain was stored."""

    def fn(h, w):
        for _ in range(6):
            h = h + torch.layer_norm(h, (16,)) @ w
        return torch.layer_norm(h, (16,))

    compiled = check(fn, torch.randn(32, 16), torch.randn(16, 16))
    assert max(live_storages(compiled.artifact.wrapper_source)) <= 4
