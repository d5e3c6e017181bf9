"""The inductor's C++ kernels with symbolic sizes: one compiled library serves every size.

Graphs whose inputs have symbolic sizes (``dynamic=True``, automatic dynamic shapes) are
lowered once; sizes and strides become expressions of the ShapeEnv's symbols, kernels take
them as ``int64_t`` arguments. Every case runs at several sizes against eager; what the
inductor can't compile symbolically goes back to one compile per size, with a log line.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln_inductor.compile_fx import generate
from torchkiln_inductor.options import InductorOptions

F = torch.nn.functional


@pytest.fixture(autouse=True)
def fresh_state(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    torchkiln.reset()
    yield
    torchkiln.reset()


def symbolic_compile(fn, example):
    """``fn`` traced with every input size symbolic, compiled by the inductor (C++)."""
    gm = make_fx(fn, tracing_mode="symbolic")(*example)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    generated = generate(gm, fakes, InductorOptions())
    return generated, generated.artifact.load(fresh=True)


# each: fn, inputs of sizes (n, m); sizes chosen apart from every static size in the cases
CASES = {
    "sum_last": (lambda x: x.sum(-1), lambda n, m: [torch.randn(n, m)]),
    "sum_first": (lambda x: x.sum(0), lambda n, m: [torch.randn(n, m)]),
    "softmax": (lambda x: torch.softmax(x, -1), lambda n, m: [torch.randn(n, m)]),
    "layer_norm": (
        lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
        lambda n, m: [torch.randn(n, m), torch.randn(m), torch.randn(m)],
    ),
    "var_mean": (lambda x: torch.var_mean(x, 1), lambda n, m: [torch.randn(n, m, 5)]),
    "mean_of_two_dims": (lambda x: x.mean((0, 1)), lambda n, m: [torch.randn(n, m, 3)]),
    "argmax": (lambda x: x.argmax(-1), lambda n, m: [torch.randn(n, m)]),
    "broadcast_bias": (lambda x, b: x + b, lambda n, m: [torch.randn(n, m), torch.randn(m)]),
    "permute": (
        lambda x: (x.permute(1, 0, 2) + 1).contiguous(),
        lambda n, m: [torch.randn(n, m, 3)],
    ),
    "expand": (lambda x: x.unsqueeze(1).expand(-1, 3, -1) * 2, lambda n, m: [torch.randn(n, m)]),
    "matmul": (
        lambda x, w: torch.relu(x @ w),
        lambda n, m: [torch.randn(n, 4, m), torch.randn(m, 5)],
    ),
    "slices": (lambda x: x[:, 1:] * x[:, :-1], lambda n, m: [torch.randn(n, m)]),
    "embedding": (
        lambda w, i: F.embedding(i, w),
        lambda n, m: [torch.randn(10, 4), torch.randint(0, 10, (n, m))],
    ),
    "arange": (lambda x: x + torch.arange(x.shape[-1]), lambda n, m: [torch.randn(n, m)]),
    "cat": (
        lambda x, y: torch.cat([x, y], 1),
        lambda n, m: [torch.randn(n, m), torch.randn(n, 3)],
    ),
    "index": (
        lambda x, i: x[i],
        lambda n, m: [torch.randn(n, m), torch.randint(0, n, (5,))],
    ),
    "causal_softmax": (
        lambda x: x.masked_fill(
            torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bool).tril().logical_not(), -1e9
        ).softmax(-1),
        lambda n, m: [torch.randn(n, m, m)],
    ),
}
SIZES = [(6, 7), (9, 17), (11, 130)]


def test_a_large_reduction_of_everything_splits_into_chunks_of_symbolic_length():
    fn = lambda x: x.sum()  # noqa: E731
    generated, compiled = symbolic_compile(fn, [torch.rand(300, 301)])
    assert len(generated.kernels) == 2  # the partial sums, then their sum
    for n, m in [(300, 301), (257, 263), (2, 3)]:
        x = torch.rand(n, m)
        torch.testing.assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_compile_serves_every_size(name):
    fn, make = CASES[name]
    generated, compiled = symbolic_compile(fn, make(*SIZES[0]))
    assert generated.graph.size_sources, "the inputs' sizes should be symbolic"
    for sizes in SIZES:
        inputs = make(*sizes)
        torch.testing.assert_close(compiled(*inputs), fn(*inputs))


def test_kernels_take_the_sizes_as_arguments():
    generated, compiled = symbolic_compile(lambda x, y: x * 2 + y.sin(), make_pair(6, 7))
    (kernel,) = generated.kernels
    assert len(kernel.size_params) == 2
    assert all(f"int64_t {s}" in kernel.source for s in kernel.size_params)
    for n, m in SIZES:
        x, y = make_pair(n, m)
        torch.testing.assert_close(compiled(x, y), x * 2 + y.sin())


def make_pair(n, m):
    return [torch.randn(n, m), torch.randn(n, m)]


def test_rows_merge_into_one_loop_of_symbolic_length():
    """``(s1*i + j) // s1`` simplifies to ``i`` for ``j < s1``: an elementwise kernel over a
    contiguous ``[s0, s1]`` tensor runs one loop of ``s0*s1`` iterations."""
    generated, _ = symbolic_compile(lambda x, y: x * 2 + y, make_pair(6, 7))
    source = generated.kernels[0].source
    assert source.count("for (int64_t") == 1


class Block(torch.nn.Module):
    """A GPT-2 style block: ``view(b, t, h, d)`` from the input's sizes, a causal mask of t."""

    def __init__(self, c: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
        self.qkv, self.proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.fc, self.out = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (
            y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
            for y in self.qkv(self.ln1(x)).split(c, dim=2)
        )
        att = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


LENGTHS = [5, 9, 17, 33, 12, 7, 40]


@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
def test_block_inference_compiles_one_library_for_every_length(dynamic):
    model, twin = Block(), Block()
    twin.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, dynamic=dynamic)
    with torch.no_grad():
        for t in LENGTHS:
            x = torch.randn(2, t, 32)
            torch.testing.assert_close(compiled(x), twin(x))
    assert torchkiln.counters["frames"]["total"] == (2 if dynamic is None else 1)
    assert torchkiln.counters["static_shapes"]["specializations"] == 0
    # automatic dynamic: one library for the first (static) size, one for every other
    assert torchkiln.counters["inductor"]["cpp_builds"] == (2 if dynamic is None else 1)


def train_block_like_eager(compiled, model: Block, twin: Block, lengths) -> None:
    """A training step of ``compiled`` (of ``model``) and of ``twin`` per length: the outputs,
    the input's gradient and every parameter's match."""
    for t in lengths:
        x = torch.randn(2, t, 32, requires_grad=True)
        x_twin = x.detach().clone().requires_grad_()
        out, expected = compiled(x), twin(x_twin)
        out.square().mean().backward()
        expected.square().mean().backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x.grad, x_twin.grad)
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None


def test_block_training_with_variable_length_matches_eager_gradients():
    model, twin = Block(), Block()
    twin.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, dynamic=True)
    train_block_like_eager(compiled, model, twin, LENGTHS[:4])
    assert torchkiln.counters["frames"]["total"] == 1
    assert torchkiln.counters["static_shapes"]["specializations"] == 0


def test_what_needs_concrete_sizes_compiles_per_size_and_says_why(caplog):
    """A slice starting at another dimension's size: the start may pass the end, which
    torch clamps (an empty slice), and no one kernel's indexing says which."""

    def tail(x):
        return x[:, x.shape[0] :] * 2

    compiled = torchkiln.compile(tail, dynamic=True)
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        for n, m in [(3, 8), (5, 12), (4, 6)]:
            x = torch.randn(n, m)
            torch.testing.assert_close(compiled(x), tail(x))
    assert torchkiln.counters["static_shapes"]["specializations"] == 3
    assert "compiles this graph once per concrete size" in caplog.text


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.view(x.shape[0], -1, 2).sum(1) * 2,
        lambda x: x.view(x.shape[0] // 4, -1) * 2,
        lambda x: x.reshape(x.shape[0], x.shape[1] // 4, 4).transpose(1, 2).contiguous(),
    ],
    ids=["pairs", "quarter_rows", "split_heads"],
)
def test_views_to_quotients_of_sizes_compile_once(fn):
    """Torch writes these views' sizes and strides with ``s // (s // 2)`` and
    ``Max(1, s // 4)``, and guards the quotient non-zero: proved at least 1 from that
    guard, one library serves every size (before, one compile per size)."""
    compiled = torchkiln.compile(fn, dynamic=True)
    for n, m in [(8, 8), (12, 12), (20, 16), (28, 24)]:
        x = torch.randn(n, m)
        torch.testing.assert_close(compiled(x), fn(x))
    assert torchkiln.counters["static_shapes"]["specializations"] == 0


def test_batch_norm_training_takes_its_saved_scalars_as_expressions_of_the_sizes():
    """The forward saves ``1 / numel`` (a SymFloat) for the backward, which compiles at the
    first backward: taken at that call's value (1/128 at batch 2), the gradients of batch 3
    were wrong with no error."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU()
    )
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, dynamic=True)
    for batch in (2, 3, 5):
        x = torch.randn(batch, 3, 8, 8)
        compiled(x).square().mean().backward()
        twin(x).square().mean().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
    assert torchkiln.counters["static_shapes"]["specializations"] == 0


@torch.library.custom_op("kiln_symbolic::doubled_and_rows", mutates_args=())
def doubled_and_rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    return x * 2, x.shape[0]


@doubled_and_rows.register_fake
def _(x):
    return x * 2, x.shape[0]


def test_an_extern_call_returning_a_size_beside_tensors():
    """CUDA attention returns its max sequence lengths so: SymInts in a symbolic graph."""

    def fn(x):
        doubled, rows = doubled_and_rows(x)
        return doubled + rows

    compiled = torchkiln.compile(fn, dynamic=True, fullgraph=True)
    for n in (3, 5, 8):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), fn(x))
    assert torchkiln.counters["static_shapes"]["specializations"] == 0
