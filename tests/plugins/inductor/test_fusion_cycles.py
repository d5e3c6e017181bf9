"""The fusion scheduler never forms a cycle, whatever order it tries fusions in.

A path between two kernels may run through a kernel an earlier fusion formed
(into one of its nodes, out of another): RMSNorm -> Linear -> RMSNorm's
backward has one (Llama, Mistral, Qwen2 and Gemma training crashed on it), and so
does CLIP's contrastive head.
"""

import random

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import aten_graph

import torchkiln
import torchkiln_inductor.compile_fx as compile_fx_module
from torchkiln_inductor.compile_fx import compile_many, generate
from torchkiln_inductor.ir import ComputedBuffer, ExternKernel, GraphIR, MultiOutput
from torchkiln_inductor.options import parse_options
from torchkiln_inductor.scheduler import FusedKernel, Schedule, Scheduler, _Ancestry


def rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def rms_linear_rms(x, w):
    return rms(rms(x) @ w.t())


@pytest.mark.parametrize("shape", [(2, 4, 64), (3, 5, 32)])
def test_rms_norm_linear_rms_norm_trains_like_eager(shape):
    x = torch.randn(shape, requires_grad=True)
    w = torch.randn(shape[-1], shape[-1], requires_grad=True)
    out = torchkiln.compile(rms_linear_rms, backend="inductor")(x, w)
    grads = torch.autograd.grad(out.sum(), (x, w))
    expected = rms_linear_rms(x, w)
    torch.testing.assert_close(out, expected)
    for g, e in zip(grads, torch.autograd.grad(expected.sum(), (x, w))):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return self.weight * rms(x)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


class LlamaBlock(torch.nn.Module):
    """Pre-norm decoder block as Hugging Face's Llama: RMSNorm, rotary causal attention,
    RMSNorm, SwiGLU MLP, with one projection per query/key/value and gate/up."""

    def __init__(self, dim=32, heads=4, hidden=48):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = (torch.nn.Linear(dim, hidden, bias=False) for _ in range(2))
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        freqs = torch.arange(t).float()[:, None] / 10000 ** (
            torch.arange(0, d // self.heads, 2).float() / (d // self.heads)
        )
        cos, sin = torch.cat((freqs, freqs), -1).cos(), torch.cat((freqs, freqs), -1).sin()
        h = self.attn_norm(x)
        q, k, v = (
            p(h).view(b, t, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v)
        )
        attn = F.scaled_dot_product_attention(
            rotate(q, cos, sin), rotate(k, cos, sin), v, is_causal=True
        )
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def test_llama_block_trains_like_eager():
    block = LlamaBlock()
    x = torch.randn(2, 8, 32, requires_grad=True)
    out = torchkiln.compile(block, backend="inductor")(x)
    params = [x, *block.parameters()]
    grads = torch.autograd.grad(out.square().mean(), params)
    expected = block(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    for g, e in zip(grads, torch.autograd.grad(expected.square().mean(), params)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def clip_loss(text, image, text_proj, image_proj, logit_scale):
    """CLIP's contrastive head: projections, L2 normalisation, symmetric cross-entropy."""
    t, i = text @ text_proj.t(), image @ image_proj.t()
    t, i = t / t.norm(p=2, dim=-1, keepdim=True), i / i.norm(p=2, dim=-1, keepdim=True)
    logits = t @ i.t() * logit_scale.exp()
    labels = torch.arange(len(logits))
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


def test_clip_contrastive_loss_trains_like_eager():
    args = [torch.randn(3, 32), torch.randn(3, 32), torch.randn(16, 32), torch.randn(16, 32)]
    args = [a.requires_grad_() for a in [*args, torch.tensor(2.0)]]
    loss = torchkiln.compile(clip_loss, backend="inductor")(*args)
    expected = clip_loss(*args)
    torch.testing.assert_close(loss, expected)
    for g, e in zip(torch.autograd.grad(loss, args), torch.autograd.grad(expected, args)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


# -- random DAGs, random fusion orders -------------------------------------------------


def _brute_force_cycle(deps, kernel_of, a, b):
    """Whether the kernel graph has a cycle once the kernels of ``a`` and ``b`` are one."""
    merged = {n: (kernel_of[a] if kernel_of[n] == kernel_of[b] else kernel_of[n]) for n in deps}
    edges = {(merged[d], merged[n]) for n in deps for d in deps[n] if merged[d] != merged[n]}
    succ = {}
    for u, v in edges:
        succ.setdefault(u, set()).add(v)
    state = {}

    def visit(u):  # depth-first: a back edge is a cycle
        state[u] = "open"
        for v in succ.get(u, ()):
            if state.get(v) == "open" or (v not in state and visit(v)):
                return True
        state[u] = "done"
        return False

    return any(u not in state and visit(u) for u in set(merged.values()))


def test_ancestry_refuses_exactly_the_fusions_that_close_a_cycle():
    for seed in range(30):
        rng = random.Random(seed)
        names = [f"n{i}" for i in range(rng.randint(4, 16))]
        deps = {n: {d for d in names[:i] if rng.random() < 0.25} for i, n in enumerate(names)}
        ancestry, kernel_of = _Ancestry(deps, names), {n: n for n in names}
        pairs = [(a, b) for a in names for b in names if a < b]
        rng.shuffle(pairs)
        for a, b in pairs:
            if kernel_of[a] == kernel_of[b]:
                continue
            cycle = _brute_force_cycle(deps, kernel_of, a, b)
            assert ancestry.creates_cycle(a, b) == cycle, (seed, a, b)
            if not cycle:
                ancestry.fuse(a, b)
                old = kernel_of[b]
                kernel_of = {n: kernel_of[a] if k == old else k for n, k in kernel_of.items()}


class ShuffledScheduler(Scheduler):
    """Tries every pair of kernels, in a random order (instead of best first)."""

    rng = random.Random(0)

    def _candidates(self, kernels):
        pairs = [(a, b) for a in range(len(kernels)) for b in range(a + 1, len(kernels))]
        self.rng.shuffle(pairs)
        return pairs


def random_program(rng: random.Random):
    """A random DAG of pointwise ops, reductions, matmuls and transposed reads; some of
    its values are outputs."""
    steps = []
    for i in range(rng.randint(6, 14)):
        kind = rng.choice(["unary", "binary", "binary", "reduce", "matmul", "transpose"])
        a, b = rng.randrange(i + 2), rng.randrange(i + 2)  # 0 and 1 are the inputs
        steps.append((kind, a, b, rng.choice([-1, 1]), rng.random() < 0.3))

    def program(x, y, w):
        values = [x, y]
        for kind, a, b, variant, _ in steps:
            u, v = values[a], values[b]
            if kind == "unary":
                values.append(torch.tanh(u) if variant < 0 else torch.sigmoid(u))
            elif kind == "binary":
                values.append(torch.tanh(u * v) if variant < 0 else u - v)
            elif kind == "reduce":
                values.append(u.mean(variant, keepdim=True) if a % 2 else u.amax(variant, True))
            elif kind == "matmul":
                values.append(torch.tanh(u.expand(x.shape) @ w))
            else:
                values.append(u.expand(x.shape).transpose(-1, -2) + v)
        outputs = [v for v, step in zip(values[2:], steps) if step[4]]
        return (*outputs, values[-1])

    return program


def check_schedule(schedule: Schedule, graph: GraphIR) -> None:
    """Every buffer computed once, after everything it reads (in an earlier step, or
    earlier in its kernel)."""
    position = {}
    for i, step in enumerate(schedule.steps):
        if isinstance(step, FusedKernel):
            for j, node in enumerate(step.nodes):
                assert node.name not in position
                position[node.name] = (i, j)
        else:
            position[step.kernel.name] = (i, 0)
    steps = {b.name for b in graph.buffers if isinstance(b, (ComputedBuffer, ExternKernel))}
    assert set(position) == steps
    for i, step in enumerate(schedule.steps):
        if isinstance(step, FusedKernel):
            reads = [((i, j), node.read_names()) for j, node in enumerate(step.nodes)]
        else:
            reads = [((i, 0), {v.buffer.name for v in step.kernel.tensor_args()})]
        for at, names in reads:
            for name in names:
                buf = graph.buffer(name)
                producer = position.get(buf.parent.name if isinstance(buf, MultiOutput) else name)
                assert producer is None or producer < at, name


def test_random_dags_under_random_fusion_orders_schedule_soundly(monkeypatch):
    monkeypatch.setattr(compile_fx_module, "Scheduler", ShuffledScheduler)
    monkeypatch.setattr(ShuffledScheduler, "rng", random.Random(0))
    cases = []
    for seed in range(24):
        rng = random.Random(seed)
        program = random_program(rng)
        args = [torch.randn(3, 6, 6), torch.randn(3, 6, 6), torch.randn(6, 6) / 6**0.5]
        generated = generate(aten_graph(program, *args), args, parse_options({}))
        check_schedule(generated.schedule, generated.graph)
        cases.append((program, args, generated))
    compiled = compile_many([g for _, _, g in cases])
    for (program, args, _), fn in zip(cases, compiled):
        for got, expected in zip(fn(*args), program(*args), strict=True):
            torch.testing.assert_close(got, expected)
