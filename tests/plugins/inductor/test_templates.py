"""max_autotune_gemm: Triton matmul and convolution templates with fused epilogues, measured
against aten.

Triton's interpreter runs the templates on CPU tensors (``cpu_backend="triton"``,
``TRITON_INTERPRET=1``), where timings mean nothing: a fake clock decides which choice wins
(:func:`force`), so each test knows whether the template or the aten call made its results.
Sizes are small and no multiple of the blocks (16 at least): masks and wrapped rows run.
"""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from inductor_testing import check, compile_fn, needs_interpreter

import torchkiln
from torchkiln_inductor import graph
from torchkiln_inductor.autotune import store, templates, tuner
from torchkiln_inductor.autotune.tuner import Choice
from torchkiln_inductor.options import parse_options

pytest.importorskip("triton", reason="triton is not installed")
pytestmark = needs_interpreter

#: the aten call and one template config measured per matmul
GEMM = {"cpu_backend": "triton", "max_autotune_gemm": True, "autotune.max_trials": 2}
HALF = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Winners of one test never reach another (nor the user's cache), nor do its compiled
    frames (whose tuned matmuls went straight to their winners)."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(store, "_tuned", {})
    torchkiln.reset()
    torchkiln.counters.clear()


class FakeClock:
    """Time that passes only when a choice runs: ``winner`` ("template" or "aten") costs 1,
    the others 5. Measuring launches nothing (a measured run would write the real outputs,
    hiding what the winner leaves unwritten). ``measured``: the kinds of choice measured;
    ``used``: those whose results the calls returned, in order."""

    def __init__(self, winner: str):
        self.winner = winner
        self.now = 0.0
        self.measured: list[str] = []
        self.used: list[str] = []
        self._measuring = False

    def benchmark(self, fn) -> float:
        start, self._measuring = self.now, True
        try:
            fn()
        finally:
            self._measuring = False
        return self.now - start

    def timed(self, choice: Choice) -> Choice:
        kind = "aten" if choice.name.startswith("aten.") else "template"

        def build(args):
            launch = choice.build(args)

            def run(*tensors):
                if self._measuring:
                    self.measured.append(kind)
                    self.now += 1.0 if kind == self.winner else 5.0
                    return None
                self.used.append(kind)
                return launch(*tensors)

            return run

        return Choice(choice.name, build)


@pytest.fixture
def force(monkeypatch):
    """``force("template")`` or ``force("aten")``: that choice wins every matmul's tuning."""

    def set_winner(winner: str) -> FakeClock:
        clock = FakeClock(winner)
        choices = templates.template_choices
        monkeypatch.setattr(
            templates, "template_choices", lambda *a: [clock.timed(c) for c in choices(*a)]
        )
        monkeypatch.setattr(tuner, "_benchmark", lambda args: clock.benchmark)
        return clock

    return set_winner


def gemm_check(fn, *args, templates: int, **kwargs):
    """``check`` with the templates on; ``templates``: the matmuls that must run as one."""
    compiled = check(fn, *args, **{**GEMM, **kwargs})
    wrapper = compiled.artifact.wrapper_source
    assert wrapper.count("kiln_mm_") == templates and "aten_" not in wrapper
    assert torchkiln.counters["autotune"]["tuned"] == templates
    return compiled


def kernels_called(compiled) -> list[str]:
    """The generated Triton kernels the wrapper calls, templates aside."""
    calls = [line.strip() for line in compiled.artifact.wrapper_source.splitlines()]
    templates = ("kiln_mm_", "kiln_conv_")
    return [
        c.split("(")[0]
        for c in calls
        if c.startswith("kiln_") and not any(t in c for t in templates)
    ]


@pytest.mark.parametrize("dtype", HALF)
def test_mm_addmm_bmm_with_transposed_operands_match_eager(force, dtype):
    """Single tiles with masked K steps; a bmm over 2 x 3 tiles; a tall mm whose 9 x 2 tiles
    run in groups of GROUP_M=8 rows (the last group one row)."""
    clock = force("template")

    def fn(x, w, bias, p, q, tall, wide):
        return (
            torch.addmm(bias, x, w.t(), beta=0.5, alpha=2.0),
            x[:, 3:] @ w[:, 3:].t(),  # operands that start past their buffers' starts
            torch.bmm(p, q.transpose(1, 2)),
            tall @ wide.t(),
        )

    args = [torch.randn(20, 40), torch.randn(24, 40), torch.randn(24)]
    args += [torch.randn(2, 150, 9), torch.randn(2, 300, 9)]
    args += [torch.randn(1100, 16), torch.randn(300, 16)]
    gemm_check(fn, *(a.to(dtype) for a in args), templates=4)
    assert clock.used == ["template"] * 4


@pytest.mark.parametrize("dtype", HALF)
def test_epilogues_fuse_into_the_template_store(force, dtype):
    """Bias + relu, gelu, residual add, scaling, cast: one op each after the matmul, as eager
    rounds a half-precision result after each op (a fused chain rounds once, at the end)."""
    clock = force("template")

    def fn(x, w, b, r):
        y = x @ w.t()
        return (
            torch.relu(F.linear(x, w, b)),
            F.gelu(F.linear(x, w, b)),
            y + r,
            (x[:, :16] @ w[:, :16].t()) * 0.25,
            y.to(torch.bfloat16 if dtype != torch.bfloat16 else torch.float32),
        )

    args = [torch.randn(20, 40), torch.randn(24, 40), torch.randn(24), torch.randn(20, 24)]
    # the two linear layers are one product (common subexpressions are merged): one
    # template stores both its relu and its gelu
    compiled = gemm_check(fn, *(a.to(dtype) for a in args), templates=3)
    assert kernels_called(compiled) == []  # every epilogue ran inside a template
    assert clock.used == ["template"] * 3


def test_epilogue_chain_over_a_3d_view_of_the_product(force):
    """A linear layer on (batch, seq, features): the epilogue loops over (2, 5, 24), the
    product is (10, 24); gelu, residual and scaling fuse as one chain (float32)."""
    force("template")

    def fn(x, w, b, r):
        return (F.gelu(F.linear(x, w, b)) + r) * 0.5

    compiled = gemm_check(
        fn,
        torch.randn(2, 5, 40),
        torch.randn(24, 40),
        torch.randn(24),
        torch.randn(2, 5, 24),
        templates=1,
    )
    assert kernels_called(compiled) == []


def test_consumers_that_cannot_fuse_read_the_stored_product(force):
    """A reduction, a slice (another index space) and a flip (other elements of the product)
    stay kernels of their own, after templates that store the products."""
    force("template")

    def fn(x, w, c):
        y, z = x @ w, x @ w.t()
        return y.sum(1) + c, z[:, 2:10] * 2, y.flip(0) + y

    compiled = gemm_check(
        fn, torch.randn(20, 40), torch.randn(40, 40), torch.randn(20), templates=2
    )
    assert len(kernels_called(compiled)) == 2


def test_forced_aten_choice_runs_the_epilogue_kernel_and_matches_eager(force):
    clock = force("aten")

    def fn(x, w, b):
        y = F.linear(x, w, b)
        return torch.relu(y) * 2, y  # the product is an output too: stored by either choice

    args = (torch.randn(20, 40), torch.randn(24, 40), torch.randn(24))
    compiled = gemm_check(fn, *args, templates=1)
    assert clock.measured == ["aten", "template"] and clock.used == ["aten"]
    assert kernels_called(compiled) == []  # the aten choice launches the epilogue itself
    args = (torch.randn(20, 40), torch.randn(24, 40), torch.randn(24))
    torch.testing.assert_close(compiled(*args), list(fn(*args)))  # the winner, straight
    assert clock.used == ["aten"] * 2


def test_template_configs_compile_in_the_graph_s_worker_batch(force):
    """A template's configs that tuning measures (the aten call is the first of the
    ``max_trials``) go to the compile workers with the graph's other kernels, for its
    parameters' dtypes (a bfloat16 product cast to float32 by its epilogue here)."""
    force("template")

    def fn(a, b):
        return torch.relu(a @ b).float()

    a, b = torch.randn(20, 40, dtype=torch.bfloat16), torch.randn(40, 24, dtype=torch.bfloat16)
    compiled = gemm_check(fn, a, b, templates=1, **{"autotune.max_trials": 3})
    (launch,) = compiled.artifact.triton.templates
    assert launch.dtypes == (torch.bfloat16, torch.bfloat16, torch.float32)
    template_fn = SimpleNamespace(fn=fn)  # what a job reads of a JIT function
    settings = compiled.artifact.triton.template_tuning
    jobs = templates.TunedTemplate(template_fn, None, launch, settings, {}).worker_jobs()
    configs = templates.configs_for(launch)[:2]
    assert [(j.dtypes, j.num_warps, j.num_stages) for j in jobs] == [
        (("bfloat16", "bfloat16", "float32"), c.num_warps, c.num_stages) for c in configs
    ]
    assert [dict(j.meta)["BLOCK_M"] for j in jobs] == [c.block_m for c in configs]


class LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 24)

    def forward(self, x):
        return F.gelu(self.lin(x))


@pytest.mark.parametrize("winner", ["template", "aten"])
def test_linear_gelu_training_matches_eager(force, winner):
    clock = force(winner)
    torch.manual_seed(0)
    model, eager = LinearGelu(), LinearGelu()
    eager.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, backend="inductor", options=GEMM)
    x = torch.randn(2, 5, 16, requires_grad=True)
    twin = x.detach().clone().requires_grad_()
    out, expected = compiled(x), eager(twin)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, twin.grad)
    for p, q in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert torchkiln.counters["autotune"]["tuned"] == 3  # forward addmm, backward's two mm
    assert clock.used == [winner] * 3


def test_options_turn_templates_on_and_leave_the_code_unchanged_off(force):
    force("template")

    def fn(x, w, b):
        return torch.relu(x @ w + b)

    args = (torch.randn(20, 40), torch.randn(40, 24), torch.randn(24))
    assert parse_options({"max_autotune_gemm": True}).max_autotune_gemm
    default = compile_fn(fn, *args, cpu_backend="triton").artifact
    off = compile_fn(fn, *args, cpu_backend="triton", max_autotune_gemm=False).artifact
    assert off.wrapper_source == default.wrapper_source
    assert off.triton.source == default.triton.source
    assert "aten_mm_default(" in default.wrapper_source and "kiln_mm_" not in default.triton.source
    # max_autotune turns the templates on too (as torch's max-autotune modes do)
    tuned = check(fn, *args, cpu_backend="triton", max_autotune=True, **{"autotune.max_trials": 2})
    assert "kiln_mm_" in tuned.artifact.wrapper_source


# -- convolutions ---------------------------------------------------------------------------


def conv_check(fn, *args, templates: int, **kwargs):
    """``check`` with the templates on; ``templates``: the convolutions that must run as one."""
    compiled = check(fn, *args, **{**GEMM, **kwargs})
    wrapper = compiled.artifact.wrapper_source
    assert wrapper.count("kiln_conv_") == templates and "aten_" not in wrapper
    assert torchkiln.counters["autotune"]["tuned"] == templates
    return compiled


def channels_last(*tensors):
    return [t.to(memory_format=torch.channels_last) for t in tensors]


@pytest.mark.parametrize("dtype", HALF)
def test_convolutions_match_eager(force, dtype):
    """Stride 2 with padding and a bias; dilation 2 with padding, no bias; a 1x1 with a bias;
    a strided 1x1 (ResNet's downsampling) on a channels-last input. 5 input channels: every
    reduction step masks them (no multiple of BLOCK_K); 2 x 7 x 9 positions: rows wrap."""
    clock = force("template")

    def fn(x, x_last, w3, w1, b):
        return (
            F.conv2d(x, w3, b, stride=2, padding=1),
            F.conv2d(x, w3, None, padding=2, dilation=2),
            F.conv2d(x, w1, b),
            F.conv2d(x_last, w1, None, stride=2),
        )

    x = torch.randn(2, 5, 7, 9)
    args = [x, *channels_last(x), torch.randn(6, 5, 3, 3), torch.randn(6, 5, 1, 1)]
    args.append(torch.randn(6))
    conv_check(fn, *(a.to(dtype) for a in args), templates=4)
    assert clock.used == ["template"] * 4


def test_convolution_reads_operands_in_any_strides(force, monkeypatch):
    """Where the graph keeps eager's layouts (the Triton target makes 2-D convolutions
    channels-last, but the weights of a CUDA graph's inputs reach the call as they are), the
    template reads views as they lie: a contiguous input, a strided and offset slice of one,
    a weight transposed in its spatial dimensions, a channels-last input."""
    monkeypatch.setattr(graph, "_is_conv2d", lambda node: False)
    clock = force("template")

    def fn(x, x_last, w, b):
        return (
            F.conv2d(x, w, b, stride=2, padding=1),
            F.conv2d(x[:, :, 1:, ::2], w.transpose(2, 3), None, padding=(0, 1)),
            F.conv2d(x_last, w, b, dilation=2),
        )

    x = torch.randn(2, 5, 8, 9)
    args = (x, *channels_last(x), torch.randn(6, 5, 3, 3), torch.randn(6))
    conv_check(fn, *args, templates=3)
    assert clock.used == ["template"] * 3


@pytest.mark.parametrize("dtype", HALF)
def test_conv_epilogues_fuse_into_the_template_store(force, dtype):
    """ReLU, a residual add, and batch norm with running statistics then ReLU, each fused:
    no kernel of their own, the products never stored (channels-last input and weights, which
    the convolutions read as they are: no layout copies either)."""
    clock = force("template")

    def fn(x, w, b, r, mean, var, gamma, beta):
        y = F.conv2d(x, w, b, padding=1)
        z = F.conv2d(x, w, None, stride=2)
        bn = F.batch_norm(z, mean, var, gamma, beta, training=False, eps=1e-3)
        return torch.relu(y), y + r, torch.relu(bn)

    x, w = channels_last(torch.randn(2, 5, 7, 9), torch.randn(6, 5, 3, 3))
    r = torch.randn(2, 6, 7, 9)
    stats = [torch.randn(6), torch.rand(6) + 0.5, torch.randn(6), torch.randn(6)]
    args = [x, w, torch.randn(6), r, *stats]
    # the two convolutions with a padding of 1 are one (common subexpressions are merged):
    # one template stores both its ReLU and its sum
    compiled = conv_check(fn, *(a.to(dtype) for a in args), templates=2)
    assert kernels_called(compiled) == []
    assert clock.used == ["template"] * 2


@pytest.mark.parametrize("winner", ["template", "aten"])
def test_conv_choice_keeps_the_faster_and_matches_eager(force, winner):
    """Both choices measured (aten's convolution first); the faster computes every later call.
    The product is an output too: the call returns it, made by aten or by the template."""
    clock = force(winner)

    def fn(x, w, b):
        y = F.conv2d(x, w, b, stride=2, padding=1)
        return torch.relu(y) * 2, y

    args = (*channels_last(torch.randn(2, 5, 7, 9), torch.randn(6, 5, 3, 3)), torch.randn(6))
    compiled = conv_check(fn, *args, templates=1)
    assert clock.measured == ["aten", "template"] and clock.used == [winner]
    assert kernels_called(compiled) == []  # the aten choice launches the epilogue itself
    args = (*channels_last(torch.randn(2, 5, 7, 9), torch.randn(6, 5, 3, 3)), torch.randn(6))
    torch.testing.assert_close(compiled(*args), list(fn(*args)))  # the winner, straight
    assert clock.used == [winner] * 2


def test_stored_conv_winner_is_reused_without_measuring(force):
    """A second compile (another process: nothing of the first in memory) reads the winner
    from disk and measures nothing."""
    clock = force("aten")

    def fn(x, w):
        return torch.relu(F.conv2d(x, w, padding=1))

    args = (torch.randn(2, 5, 7, 9), torch.randn(6, 5, 3, 3))
    conv_check(fn, *args, templates=1)
    store._tuned.clear()
    torchkiln.reset()
    compiled = check(fn, *args, **GEMM)
    assert clock.measured == ["aten", "template"] and clock.used == ["aten", "aten"]
    assert torchkiln.counters["autotune"]["reused"] == 1
    assert "kiln_conv_" in compiled.artifact.wrapper_source


def test_convolutions_the_template_does_not_compute_stay_aten(force):
    """Grouped, transposed and 1-D convolutions keep their aten calls."""
    force("template")

    def fn(x, w_grouped, w_transposed, x1d, w1d):
        return (
            torch.relu(F.conv2d(x, w_grouped, padding=1, groups=2)),
            F.conv_transpose2d(x, w_transposed, stride=2),
            F.conv1d(x1d, w1d, padding=1),
        )

    args = (torch.randn(2, 4, 7, 9), torch.randn(6, 2, 3, 3), torch.randn(4, 3, 3, 3))
    args += (torch.randn(2, 4, 11), torch.randn(6, 4, 3))
    compiled = check(fn, *args, **GEMM)
    wrapper = compiled.artifact.wrapper_source
    assert wrapper.count("aten_convolution_default(") == 3 and "kiln_conv_" not in wrapper
    assert torchkiln.counters["autotune"]["tuned"] == 0


class ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(5, 6, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def test_conv_bn_relu_training_matches_eager(force):
    """Training: batch norm's statistics reduce over the convolution's output, which the
    template stores and returns; the backward's convolutions stay aten calls."""
    clock = force("template")
    torch.manual_seed(0)
    model, eager = ConvBlock(), ConvBlock()
    eager.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, backend="inductor", options=GEMM)
    x = torch.randn(2, 5, 7, 9, requires_grad=True)
    twin = x.detach().clone().requires_grad_()
    out, expected = compiled(x), eager(twin)
    out.square().sum().backward()
    expected.square().sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, twin.grad)
    for p, q in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert clock.used == ["template"]


def test_layers_of_the_same_sizes_share_one_template_function(force):
    """Two layers' matmuls with the same epilogue on buffers of the same sizes are one
    function, compiled and tuned once; a third of another size gets its own."""
    force("template")

    def fn(x, w1, w2, w3):
        y = torch.relu(x @ w1)
        return torch.relu(torch.relu(y @ w2) @ w3)

    args = (torch.randn(20, 24), torch.randn(24, 24), torch.randn(24, 24), torch.randn(24, 8))
    compiled = check(fn, *args, **GEMM)
    launches = compiled.artifact.triton.templates
    assert len(launches) == 2
    wrapper = compiled.artifact.wrapper_source
    assert sorted(wrapper.count(f"{launch.name}(") for launch in launches) == [1, 2]
