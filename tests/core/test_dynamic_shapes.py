"""Dynamic shapes: one compiled frame serves many sizes (ShapeEnv-backed SymInts in capture).

Every result is compared with eager on fresh inputs; frame counts come from
``torchkiln.counters["frames"]``.
"""

import logging

import pytest
import torch

import torchkiln
from kiln_testing import kiln_logs


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A symbolic view chain: ``view(b, t, h, d)`` from the input's sizes."""
    b, t, c = x.shape
    h = 4
    q = (x @ w).view(b, t, h, c // h).transpose(1, 2)
    return q.reshape(b * h, t, c // h).sum(-1) * len(x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_twenty_sizes_compile_at_most_two_frames(backend):
    compiled = torchkiln.compile(heads, backend=backend)
    w = torch.randn(16, 16)
    for t in range(2, 22):
        x = torch.randn(3, t, 16)
        torch.testing.assert_close(compiled(x, w), heads(x, w))
    assert frames() == 2


def test_dynamic_true_compiles_once():
    compiled = torchkiln.compile(heads, backend="aot_eager", dynamic=True)
    w = torch.randn(16, 16)
    for b, t in [(2, 5), (3, 7), (5, 2), (4, 9)]:
        x = torch.randn(b, t, 16)
        torch.testing.assert_close(compiled(x, w), heads(x, w))
    assert frames() == 1


def test_dynamic_false_specializes_every_size():
    compiled = torchkiln.compile(heads, backend="eager", dynamic=False)
    w = torch.randn(16, 16)
    for t in (3, 4, 5):
        x = torch.randn(2, t, 16)
        torch.testing.assert_close(compiled(x, w), heads(x, w))
    assert frames() == 3


def test_mark_dynamic_bounds_are_guarded():
    def f(x):
        return x * 2

    compiled = torchkiln.compile(f, backend="eager", dynamic=False)
    x = torch.randn(4, 3)
    torchkiln.mark_dynamic(x, 0, min=2, max=8)
    torch.testing.assert_close(compiled(x), f(x))
    for n in (2, 8, 5):  # in bounds: the same entry
        y = torch.randn(n, 3)
        torch.testing.assert_close(compiled(y), f(y))
    assert frames() == 1
    y = torch.randn(9, 3)  # out of bounds: a new (static) entry
    torch.testing.assert_close(compiled(y), f(y))
    assert frames() == 2


def test_mark_dynamic_rejects_bad_marks():
    x = torch.randn(1, 5)
    with pytest.raises(ValueError, match="sizes 0 and 1 are specialized"):
        torchkiln.mark_dynamic(x, 0)
    with pytest.raises(ValueError, match="outside the bounds"):
        torchkiln.mark_dynamic(x, 1, min=2, max=4)
    with pytest.raises(IndexError, match="out of range"):
        torchkiln.mark_dynamic(x, 2)


def test_mark_static_overrides_dynamic_true():
    compiled = torchkiln.compile(lambda x: x + 1, backend="eager", dynamic=True)
    for n in (3, 4):
        x = torch.randn(n, 2)
        torchkiln.mark_static(x, 0)
        torch.testing.assert_close(compiled(x), x + 1)
    assert frames() == 2


def test_sizes_zero_and_one_are_specialized():
    def f(x):
        return x.sum(0) * x.shape[0]

    compiled = torchkiln.compile(f, backend="eager", dynamic=True)
    for n in (1, 0, 4, 6, 1):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), f(x))
    assert frames() == 3  # 1, 0 and one symbolic entry for sizes >= 2


def test_python_branch_on_a_size_specializes_with_a_symbolic_guard(caplog):
    def f(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    compiled = torchkiln.compile(f, backend="eager", dynamic=True)
    with kiln_logs("guards"), caplog.at_level(logging.INFO, logger="torchkiln"):
        for n in (6, 9, 3, 2):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), f(x))
    assert frames() == 2
    guards = "\n".join(r.getMessage() for r in caplog.records if r.artifact == "guards")
    assert "[0] > 4" in guards and "[0] >= 2" in guards


def test_maybe_mark_dynamic_under_dynamic_false():
    compiled = torchkiln.compile(lambda x: x.cos(), backend="eager", dynamic=False)
    for n in (3, 5, 7):
        x = torch.randn(n)
        torchkiln.maybe_mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), x.cos())
    assert frames() == 1


def test_recompile_reason_names_the_dimension(caplog):
    compiled = torchkiln.compile(lambda x: x * 3, backend="eager")
    with kiln_logs("recompiles"), caplog.at_level(logging.INFO, logger="torchkiln"):
        compiled(torch.randn(2, 3))
        compiled(torch.randn(2, 5))
    messages = [r.getMessage() for r in caplog.records if r.artifact == "recompiles"]
    assert any("size()[1] changed from 3 to 5" in m for m in messages), messages


class Block(torch.nn.Module):
    def __init__(self, c: int = 16, h: int = 4):
        super().__init__()
        self.h = h
        self.norm = torch.nn.LayerNorm(c)
        self.qkv = torch.nn.Linear(c, 3 * c)
        self.proj = torch.nn.Linear(c, c)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(c, 32), torch.nn.GELU(), torch.nn.Linear(32, c)
        )

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = (q @ k.transpose(-1, -2) / (c // self.h) ** 0.5).masked_fill(~mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(x)


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_decomp_partition"])
def test_transformer_training_step_with_variable_sequence_length(backend):
    torch.manual_seed(0)
    model = Block()
    compiled = torchkiln.compile(model, backend=backend)
    for t in (5, 7, 12, 3):
        x = torch.randn(2, t, 16, requires_grad=True)
        out = compiled(x)
        grads = torch.autograd.grad(out.square().mean(), [x, *model.parameters()])
        ref = model(x)
        ref_grads = torch.autograd.grad(ref.square().mean(), [x, *model.parameters()])
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(grads, ref_grads)
    assert frames() == 2


@pytest.fixture
def static_backend():
    """A backend that takes static shapes only (``Backend(dynamic_shapes=False)``)."""
    from torchkiln.plugin import Backend

    def compile_static(gm, example_inputs):
        assert not any(
            isinstance(s, torch.SymInt) for x in example_inputs for s in getattr(x, "shape", ())
        )
        return gm.forward

    torchkiln.register_backend(
        Backend("static_only", compile_static, dynamic_shapes=False), override=True
    )
    return "static_only"


def test_static_shape_backend_gets_one_specialized_graph_per_size(static_backend):
    compiled = torchkiln.compile(heads, backend=static_backend)
    w = torch.randn(16, 16)
    for t in (3, 5, 8, 5):
        x = torch.randn(2, t, 16)
        torch.testing.assert_close(compiled(x, w), heads(x, w))
    assert frames() == 2
    assert torchkiln.counters["static_shapes"]["specializations"] == 2  # sizes 5 and 8


def test_dynamic_must_be_a_bool_or_none():
    with pytest.raises(TypeError, match="dynamic must be None, True or False"):
        torchkiln.compile(lambda x: x, backend="eager", dynamic="yes")


def test_views_of_inputs_and_of_outputs_keep_aliasing_under_aot_eager():
    def f(x):
        y = x * 2
        return y, y.view(-1), x[1:], x.view(x.shape[0], -1)

    compiled = torchkiln.compile(f, backend="aot_eager", dynamic=True)
    for n in (3, 6):
        x = torch.randn(n, 5)
        out = compiled(x)
        torch.testing.assert_close(out, f(x))
        out[1].add_(1)  # a write through one view shows in the other, as eagerly
        out[3][0].zero_()
        torch.testing.assert_close(out[0].view(-1), out[1])
        assert x[0].eq(0).all() and out[2].data_ptr() == x[1:].data_ptr()
    assert frames() == 1


def make_memoized():
    memo = {}

    def memoized(x):
        key = tuple(x.shape)
        if key not in memo:
            memo[key] = torch.ones(x.shape[-1]) * (len(memo) + 1)
        return x * memo[key]

    return memoized


def test_a_shape_used_as_a_dict_key_is_specialized():
    compiled = torchkiln.compile(make_memoized(), backend="eager", dynamic=True)
    twin = make_memoized()
    for n in (3, 4, 3, 5):
        x = torch.randn(n, 2)
        torch.testing.assert_close(compiled(x), twin(x))


def test_linear_of_a_3d_input_with_symbolic_sizes_stays_in_one_graph():
    """Composite ops decompose in Python under symbolic sizes, as torch.compile's tracer does:
    torch 2.11's C++ ``linear`` of a 3-D input reads ``numel()`` and broke the graph."""

    def project(x, w):
        return torch.nn.functional.linear(x, w).relu()

    compiled = torchkiln.compile(project, backend="aot_eager", dynamic=True, fullgraph=True)
    w = torch.randn(8, 16)
    for b, t in [(2, 4), (3, 7)]:
        x = torch.randn(b, t, 16)
        torch.testing.assert_close(compiled(x, w), project(x, w))
    assert frames() == 1


def test_backend_that_needs_static_shapes_for_a_graph_gets_it_per_size(caplog):
    from torchkiln.exc import NeedsStaticShapes
    from torchkiln.static_shapes import has_symbolic_inputs

    def backend(gm, example_inputs):
        if has_symbolic_inputs(gm):
            raise NeedsStaticShapes("this backend needs concrete sizes for heads")
        return gm.forward

    compiled = torchkiln.compile(heads, backend=backend, dynamic=True)
    w = torch.randn(16, 16)
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        for t in (3, 5, 8, 5):
            x = torch.randn(2, t, 16)
            torch.testing.assert_close(compiled(x, w), heads(x, w))
    assert frames() == 1
    assert torchkiln.counters["static_shapes"]["specializations"] == 3  # sizes 3, 5 and 8
    assert "once per concrete size: this backend needs concrete sizes" in caplog.text


def test_a_negated_size_stays_symbolic():
    """``-n`` of a symbolic size is a graph op, as ``n + 1`` is (it broke the graph and
    specialized every size: six frames for three sizes)."""

    def fn(x):
        n = x.shape[0]
        return x * -n + (+n), torch.arange(-n, 0)

    compiled = torchkiln.compile(fn, backend="eager", dynamic=True)
    for size in (3, 5, 7):
        x = torch.randn(size)
        torch.testing.assert_close(compiled(x), fn(x))
    assert frames() == 1
