"""The inductor with sizes only the data gives (``config.capture_dynamic_output_shape_ops``).

``x[mask]``, ``nonzero`` and ``masked_select`` stay in the graph as aten calls; their counts
are unbacked symbols (``u0``) that the wrapper reads off the call's result right after it,
and every kernel downstream takes them as size arguments. Every case runs on fresh random
inputs against eager, with counts that change between calls (none selected among them), on
the C++ path and on the Triton path (run by Triton's interpreter on CPU tensors), with
``fullgraph=True``: no graph break.
"""

import re

import pytest
import torch
from inductor_testing import needs_interpreter
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln_inductor.compile_fx import generate
from torchkiln_inductor.options import InductorOptions

PATHS = {"cpp": {}, "triton": {"cpu_backend": "triton"}}
#: fractions of the elements a mask selects: none, all, some
FRACTIONS = (0.5, 0.0, 1.0, 0.2)


@pytest.fixture(autouse=True)
def fresh_state(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torchkiln.config, "capture_dynamic_output_shape_ops", True)
    torchkiln.reset()
    yield
    torchkiln.reset()


@pytest.fixture(params=["cpp", pytest.param("triton", marks=needs_interpreter)])
def options(request):
    if request.param == "triton":
        pytest.importorskip("triton", reason="triton is not installed")
    return PATHS[request.param]


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


def mask_of(shape, fraction: float) -> torch.Tensor:
    return torch.rand(shape) < fraction


def assert_like_eager(got, expected) -> None:
    torch.testing.assert_close(got, expected, equal_nan=True)  # the mean of nothing is NaN


def mask_then_pointwise_and_reductions(x, mask):
    y = x[mask]
    z = (y * 2 + 1).sigmoid()
    return z, z.sum() + y.square().mean(), y.abs().cumsum(0)


def rows_then_reductions_both_ways(x, mask):
    """``u0`` rows of 5: an outer loop, a reduction, and a reduced dimension."""
    y = x[mask]
    return y.softmax(1), y.sum(0), (y - y.mean(1, keepdim=True)).exp().sum(1)


def nonzero_float_math(x, mask):
    idx = (x > 0.3).nonzero()  # (u0, 2): int64 coordinates, column-major
    f = idx.float()
    return f * 0.5 + 1, f.sum(0), (f[:, 0] * x.shape[1] + f[:, 1]).sqrt()


def masked_select_math(x, mask):
    y = torch.masked_select(x, mask)
    return y.exp() * 2, (y * y).sum()


def count_scales_the_input(x, mask):
    """A kernel that uses the count but reads nothing of the call giving it: it must still
    run after that call (it would fuse with the mask's kernel, over the same loop)."""
    n = x[x > 0].numel()
    return x * n + 1, torch.zeros(n) + x.sum()


CASES = {
    "mask_then_pointwise_and_reductions": (mask_then_pointwise_and_reductions, (9,), (9,)),
    "rows_then_reductions_both_ways": (rows_then_reductions_both_ways, (9, 5), (9,)),
    "nonzero_float_math": (nonzero_float_math, (6, 4), (6, 4)),
    "masked_select_math": (masked_select_math, (3, 5), (3, 5)),
    "count_scales_the_input": (count_scales_the_input, (10,), (10,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_for_every_count_with_one_compile(options, name):
    fn, x_shape, mask_shape = CASES[name]
    compiled = torchkiln.compile(fn, backend="inductor", fullgraph=True, options=options)
    for fraction in FRACTIONS:
        x, mask = torch.randn(x_shape), mask_of(mask_shape, fraction)
        if name == "nonzero_float_math":
            x = x + fraction - 0.5  # from none to most above the threshold
        assert_like_eager(compiled(x, mask), fn(x, mask))
    assert frames() == 1
    assert torchkiln.counters["static_shapes"]["specializations"] == 0


def counts_in_tensors(x, mask):
    y = x[mask]
    n = y.size(0)
    return y + y.numel(), x * n, y.new_full((n,), 2.0) * n, torch.zeros(n, 2).sum(1) + n


def test_a_count_feeds_tensor_ops(options):
    compiled = torchkiln.compile(
        counts_in_tensors, backend="inductor", fullgraph=True, options=options
    )
    for fraction in FRACTIONS:
        x, mask = torch.randn(7), mask_of(7, fraction)
        assert_like_eager(compiled(x, mask), counts_in_tensors(x, mask))
    assert frames() == 1


def symbolic_compile(fn, example, options):
    """``fn`` traced with symbolic input sizes (its counts unbacked), compiled by the inductor:
    a frame can't return a count (Python would need its value), a graph can."""
    gm = make_fx(fn, tracing_mode="symbolic")(*example)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    generated = generate(gm, fakes, InductorOptions(**options))
    return generated, generated.artifact.load(fresh=True)


def counts(x, mask):
    y = x[mask]
    return y.numel(), y.size(0) * 2 + x.size(0), y.exp()


def test_a_count_is_a_graph_output(options):
    _, compiled = symbolic_compile(counts, (torch.randn(6), torch.rand(6) > 0.5), options)
    for n, fraction in [(6, 0.5), (9, 0.0), (4, 1.0)]:
        x, mask = torch.randn(n), mask_of(n, fraction)
        got, expected = compiled(x, mask), counts(x, mask)
        assert tuple(got[:2]) == expected[:2]
        torch.testing.assert_close(got[2], expected[2])


def masked_loss(x, mask):
    y = x[mask]
    return (y.sin() * y).sum() + y.numel(), y.tanh()


def test_gradients_flow_through_the_mask_to_the_input(options):
    compiled = torchkiln.compile(masked_loss, backend="inductor", fullgraph=True, options=options)
    for fraction in FRACTIONS:
        x, mask = torch.randn(8, requires_grad=True), mask_of(8, fraction)
        twin = x.detach().clone().requires_grad_()
        got, expected = compiled(x, mask), masked_loss(twin, mask)
        assert_like_eager(got, expected)
        (got[0] + got[1].sum()).backward()
        (expected[0] + expected[1].sum()).backward()
        torch.testing.assert_close(x.grad, twin.grad)
    assert frames() == 1


def test_a_module_output_indexed_by_a_mask_trains_like_eager(options):
    model, twin = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    twin.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, backend="inductor", fullgraph=True, options=options)
    for fraction in FRACTIONS:
        x, mask = torch.randn(5, 4), mask_of((5, 3), fraction)
        (compiled(x)[mask] ** 2).sum().backward()
        (twin(x)[mask] ** 2).sum().backward()
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None


def test_symbolic_input_sizes_and_counts_share_one_compile(options):
    compiled = torchkiln.compile(
        mask_then_pointwise_and_reductions,
        backend="inductor",
        fullgraph=True,
        dynamic=True,
        options=options,
    )
    for n, fraction in [(6, 0.5), (11, 0.0), (9, 1.0), (40, 0.3)]:
        x, mask = torch.randn(n), mask_of(n, fraction)
        assert_like_eager(compiled(x, mask), mask_then_pointwise_and_reductions(x, mask))
    assert frames() == 1
    assert torchkiln.counters["static_shapes"]["specializations"] == 0


def test_counts_beyond_the_hint_and_the_blocks_on_the_cpp_path():
    """Counts past the kernels' blocks (the C++ reductions' 2048-step blocks, lanes, threads):
    no decision made on the unbacked size's hint may be wrong for them."""
    compiled = torchkiln.compile(mask_then_pointwise_and_reductions, backend="inductor")
    for n, fraction in [(20000, 0.9), (20000, 0.05), (20000, 0.0), (3, 1.0)]:
        x, mask = torch.randn(n), mask_of(n, fraction)
        got, expected = compiled(x, mask), mask_then_pointwise_and_reductions(x, mask)
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-4, atol=1e-4)
    assert torchkiln.counters["inductor"]["cpp_builds"] <= 2  # the first size, then symbolic


@needs_interpreter
def test_a_triton_reduction_over_a_count_loops_unless_its_range_fits_a_block():
    """The count's hint (8192, within its range) only picks block sizes: the kernel takes the
    count unspecialized, and loops over blocks, as no block holds every count of an input of
    symbolic size; it serves counts past its block."""
    pytest.importorskip("triton", reason="triton is not installed")
    fn = lambda x, mask: (x[mask].sum(), x[mask] * 2)  # noqa: E731
    generated, compiled = symbolic_compile(
        fn, (torch.randn(6), torch.rand(6) > 0.5), PATHS["triton"]
    )
    (symbol,) = generated.graph.size_definers
    source = generated.artifact.triton.source
    assert f"for r0offset in range(0, {symbol}, RBLOCK0)" in source
    assert f"do_not_specialize=['{symbol}']" in source
    for n, fraction in [(3000, 0.9), (3000, 0.0), (5, 1.0)]:
        x, mask = torch.randn(n), mask_of(n, fraction)
        got, expected = compiled(x, mask), fn(x, mask)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_the_wrapper_reads_each_count_after_the_call_giving_it_and_before_any_use():
    fn = lambda x: count_scales_the_input(x, None)  # noqa: E731
    generated, _ = symbolic_compile(fn, (torch.randn(10),), {})
    (symbol,) = generated.graph.size_definers
    lines = generated.artifact.wrapper_source.splitlines()
    uses = [i for i, line in enumerate(lines) if re.search(rf"\b{symbol}\b", line)]
    assert re.fullmatch(rf"\s*{symbol} = buf\d+\.size\(0\)", lines[uses[0]]), lines[uses[0]]
    assert "aten_index_Tensor(" in lines[uses[0] - 1]


def test_what_needs_concrete_sizes_says_so_clearly():
    """No compile per size serves a size that changes with the data: a clear error, not the
    per-size fallback of graphs with symbolic input sizes."""
    compiled = torchkiln.compile(
        masked_select_math, backend="inductor", fullgraph=True, options={"max_autotune": True}
    )
    with pytest.raises(torchkiln.exc.BackendCompilerFailed, match="capture_dynamic_output"):
        compiled(torch.randn(4), torch.rand(4) > 0.5)
