"""Data-dependent sizes (``config.capture_dynamic_output_shape_ops``): ``nonzero``, ``x[mask]``,
``unique``... stay in the graph with unbacked SymInts, for backends that take symbolic sizes.

Every result is compared with eager on fresh inputs, an all-False mask (size 0) among them;
frame counts come from ``torchkiln.counters["frames"]``.
"""

import logging

import pytest
import torch

import torchkiln
from kiln_testing import kiln_logs
from torchkiln.exc import Unsupported


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


@pytest.fixture
def capture_dynamic_output_shape_ops(monkeypatch):
    monkeypatch.setattr(torchkiln.config, "capture_dynamic_output_shape_ops", True)


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


def masks(n: int = 8) -> list[torch.Tensor]:
    """Masks with different counts of True, one of them none."""
    return [torch.rand(n) > 0.5, torch.zeros(n, dtype=torch.bool), torch.rand(n) > 0.2]


def mask_index(x, mask):
    y = x[mask]
    n = y.shape[0]  # a SymInt flowing into later ops
    return y * y.sum(), n * x, y.new_ones(n).sum()


def nonzero(x, mask):
    idx = mask.nonzero()
    return x[idx[:, 0]] * 2, idx.shape[0] + x.sum()


def unique(x, mask):
    u = torch.unique(x[mask].detach().round())
    return u * 2, u.shape[0] * x


def masked_select(x, mask):
    return torch.masked_select(x, mask).exp()


def where_one_arg(x, mask):
    (i,) = torch.where(mask)
    return x[i] * 3, i


def argwhere(x, mask):
    a = torch.argwhere(mask)
    return x[a.squeeze(1)].sum() * 2, a


def repeat_interleave(x, mask):
    return torch.repeat_interleave(x, mask.long() + 1) * 2


OPS = [mask_index, nonzero, unique, masked_select, where_one_arg, argwhere, repeat_interleave]


def grads(outputs, x):
    """The gradient of every differentiable output's sum with respect to ``x``."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    total = sum(o.sum() for o in outputs if o.requires_grad)
    return torch.autograd.grad(total, x)


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("fn", OPS, ids=lambda f: f.__name__)
def test_op_stays_in_one_graph(backend, fn):
    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    for mask in masks():
        x = torch.randn(8, requires_grad=True)
        got, expected = compiled(x, mask), fn(x, mask)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(grads(got, x), grads(expected, x))
    assert frames() == 1


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_mask_indexing_of_a_module_output_trains_like_eager():
    model = torch.nn.Linear(4, 4)
    compiled = torchkiln.compile(model, backend="aot_eager", fullgraph=True)

    def loss(m, x, mask):
        return (m(x)[mask] ** 2).mean()

    for mask in [torch.rand(3, 4) > 0.5, torch.rand(3, 4) > 0.7]:
        x = torch.randn(3, 4)
        got = torch.autograd.grad(loss(compiled, x, mask), list(model.parameters()))
        expected = torch.autograd.grad(loss(model, x, mask), list(model.parameters()))
        torch.testing.assert_close(got, expected)
    assert frames() == 1


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_with_symbolic_input_sizes_too():
    compiled = torchkiln.compile(mask_index, backend="aot_eager", fullgraph=True, dynamic=True)
    for n in (6, 9, 12):
        x, mask = torch.randn(n, requires_grad=True), torch.rand(n) > 0.5
        got, expected = compiled(x, mask), mask_index(x, mask)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(grads(got, x), grads(expected, x))
    assert frames() == 1


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
@pytest.mark.parametrize("fullgraph", [True, False])
def test_python_branch_on_a_data_dependent_size_breaks_cleanly(fullgraph):
    def f(x):
        idx = x.nonzero()
        if idx.shape[0] > 3:
            return x * 2
        return x - 1

    compiled = torchkiln.compile(f, backend="eager", fullgraph=fullgraph)
    if fullgraph:
        with pytest.raises(Unsupported, match=r"needs the value of u\d+ > 3, a size that depends"):
            compiled(torch.randn(8))
        return
    for x in (torch.randn(8), torch.zeros(8)):
        torch.testing.assert_close(compiled(x), f(x))
    (reason,) = torchkiln.counters["eager_fallback"]  # the frame runs as Python wrote it
    assert "a size that depends on the data" in reason


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_int_of_a_data_dependent_size_breaks_cleanly():
    def f(x, mask):
        return x * int(x[mask].shape[0])

    compiled = torchkiln.compile(f, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported, match=r"needs the value of u\d+, a size that depends"):
        compiled(torch.randn(8), torch.rand(8) > 0.5)


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_aot_view_of_a_data_dependent_size_says_what_to_do():
    def f(x, mask):
        y = x[mask] * 2
        return y, y.view(-1, 1)

    compiled = torchkiln.compile(f, backend="aot_eager", fullgraph=True)
    with pytest.raises(torchkiln.exc.BackendCompilerFailed, match=r"\.clone\(\)"):
        compiled(torch.randn(8), torch.rand(8) > 0.5)


def test_flag_off_breaks_the_graph(caplog):
    compiled = torchkiln.compile(masked_select, backend="eager")
    with kiln_logs("graph_breaks"), caplog.at_level(logging.INFO, logger="torchkiln"):
        for mask in masks():
            x = torch.randn(8)
            torch.testing.assert_close(compiled(x, mask), masked_select(x, mask))
    logged = "\n".join(r.getMessage() for r in caplog.records if r.artifact == "graph_breaks")
    assert "capture_dynamic_output_shape_ops = True to keep it in the graph" in logged
    with pytest.raises(Unsupported, match="data-dependent output size"):
        torchkiln.compile(masked_select, backend="eager", fullgraph=True)(x, mask)


@pytest.fixture
def no_data_dependent_sizes():
    """A backend that takes symbolic sizes but none only the data gives
    (``Backend(data_dependent_sizes=False)``): it fails on a graph holding one."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    from torchkiln.plugin import Backend

    def compile_fn(gm, example_inputs):
        for node in gm.graph.nodes:
            assert not free_unbacked_symbols(node.meta.get("example_value")), node.format_node()
        return gm.forward

    name = "no_data_dependent_sizes"
    torchkiln.register_backend(Backend(name, compile_fn, data_dependent_sizes=False), override=True)
    return name


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_backend_without_data_dependent_sizes_still_breaks_the_graph(
    caplog, no_data_dependent_sizes
):
    def f(x, mask):
        return x[mask].sum() + x.sum()

    compiled = torchkiln.compile(f, backend=no_data_dependent_sizes)
    with kiln_logs("graph_breaks"), caplog.at_level(logging.INFO, logger="torchkiln"):
        for mask in masks():
            x = torch.randn(8)
            torch.testing.assert_close(compiled(x, mask), f(x, mask))
    logged = "\n".join(r.getMessage() for r in caplog.records if r.artifact == "graph_breaks")
    assert f"backend {no_data_dependent_sizes!r} takes no data-dependent sizes" in logged


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_the_break_holds_in_frames_with_symbolic_sizes_too(no_data_dependent_sizes):
    """The frame after a break gets ``x[mask]``'s result, whose size changes every call: its
    capture has symbolic sizes (a ShapeEnv), which had kept the second ``x[mask]`` in the graph
    with an unbacked size, for a backend that takes none."""

    def f(x, mask):
        return x[mask].sum() + x.sum(), x[mask] * 2

    compiled = torchkiln.compile(f, backend=no_data_dependent_sizes)
    for count in (3, 5, 6, 2):  # no 0 or 1: those sizes are specialized
        x, mask = torch.randn(8), torch.randperm(8) < count
        torch.testing.assert_close(compiled(x, mask), f(x, mask))


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_capture_with_data_dependent_sizes_is_not_kept_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torchkiln.config, "persist_captures", True)
    compiled = torchkiln.compile(masked_select, backend="aot_eager", fullgraph=True)
    x, mask = torch.randn(8), torch.rand(8) > 0.5
    torch.testing.assert_close(compiled(x, mask), masked_select(x, mask))
    assert torchkiln.counters["capture_cache"]["unportable"] == 1
    assert torchkiln.counters["capture_cache"]["stores"] == 0


@pytest.mark.usefixtures("capture_dynamic_output_shape_ops")
def test_plans_with_data_dependent_sizes_are_not_stored(tmp_path, monkeypatch):
    from torchkiln.aot import ArtifactCodec, aot_autograd

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    codec = ArtifactCodec("graphs", dump=lambda gm: gm, load=lambda gm: gm)
    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm, cache=codec)
    compiled = torchkiln.compile(masked_select, backend=backend, fullgraph=True)
    for mask in masks():
        x = torch.randn(8)
        torch.testing.assert_close(compiled(x, mask), masked_select(x, mask))
    assert torchkiln.counters["aot_cache"]["stores"] == 0
