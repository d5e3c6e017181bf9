"""max_autotune on CPU: each generated C++ kernel's variants (OpenMP loop or serial, fewer
reduction lanes) timed on its real inputs at its first call, the fastest kept and stored for
the next process.

Timings on a shared host are noise to a test: which variant wins is tested with a timer the
test controls (``cpp_kernels.benchmark`` replaced by one that runs each candidate and says
how long it took), the rest for what it must keep (results as eager's whichever variant
wins, winners reused by a second process that compiles and measures nothing, variants that
fail to compile skipped).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from inductor_testing import check

import torchkiln
from torchkiln import logs
from torchkiln_inductor.autotune import cpp_configs, cpp_kernels, cpp_variants, store
from torchkiln_inductor.autotune.tuner import (
    Choice,
    TuningSettings,
    batched_min_ms,
    tune,
)
from torchkiln_inductor.codegen.cpp import GeneratedKernel, generate_kernel

TUNED = {"max_autotune": True}
CONFIGS = [c.name for c in cpp_configs.candidates(32)]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Winners of one test never reach another (nor the user's cache)."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(store, "_tuned", {})  # nor this process's
    torchkiln.counters.clear()


def favour(monkeypatch, fast: str) -> list[str]:
    """Time C++ candidates by a timer the test controls: each candidate runs for real (on
    the tuner's copies of what it writes) and takes 1 ms if it is config ``fast``, else 2 ms.
    Returns the configs timed, in order."""
    timed = []

    def benchmark(fn) -> float:
        fn()
        timed.append(fn.func.config)
        return 1.0 if fn.func.config == fast else 2.0

    monkeypatch.setattr(cpp_kernels, "benchmark", benchmark)
    return timed


def winners(caplog) -> dict[str, str]:
    return dict(re.findall(r"(kiln_\w+): (?:stored )?winner (\S+)", caplog.text))


def norm_softmax(x):
    """One reduction kernel over 2^15 elements (OpenMP by the heuristic): every config
    makes a variant of its own."""
    return torch.softmax(torch.nn.functional.layer_norm(x * 2, x.shape[-1:]), -1)


def test_candidates_are_the_heuristic_then_serial_and_fewer_lanes():
    assert CONFIGS == [
        "simdlen32",
        "simdlen32-serial",
        "simdlen16",
        "simdlen16-serial",
        "simdlen8",
        "simdlen8-serial",
    ]
    assert [c.name for c in cpp_configs.candidates(4)] == [
        "simdlen4",
        "simdlen4-serial",
        "simdlen2",
        "simdlen2-serial",
    ]


@pytest.mark.parametrize("fast", ["simdlen16", "simdlen8-serial"])
def test_tuning_keeps_the_faster_variant(monkeypatch, caplog, fast):
    timed = favour(monkeypatch, fast)
    monkeypatch.setattr(logs, "_enabled", {"autotune"})
    x = torch.randn(64, 512)
    with caplog.at_level("INFO", logger="torchkiln"):
        compiled = check(norm_softmax, x, **TUNED)
    (kernel,) = compiled.artifact.cpp_tuning.kernels
    assert [config for config, _ in kernel.variants] == CONFIGS
    assert winners(caplog) == {kernel.name: fast}
    assert sorted(timed) == sorted(CONFIGS * 5)  # every candidate in each of 5 rounds
    assert torchkiln.counters["autotune"]["benchmarked"] == len(CONFIGS)
    assert torchkiln.counters["autotune"]["tuned"] == 1
    for config in CONFIGS:  # each candidate's time logged
        assert re.search(rf"{kernel.name} {config}: \d+\.\d+ ms", caplog.text)
    # the winner's function is bound in the kernel's place: later calls skip the tuner
    winner = dict(kernel.variants)[fast]
    bound = compiled._call.__globals__[kernel.name]
    assert bound.__name__ == winner
    torch.testing.assert_close(compiled(x)[0], norm_softmax(x))


def test_rounds_time_candidates_in_turn_and_keep_their_fastest():
    """A host that runs slow while the first candidate is timed: timed once each, the
    slower candidate would win."""
    order = []

    def benchmark(fn) -> float:
        name = fn.func.__name__
        order.append(name)
        drift = 10.0 if len(order) == 1 else 0.0
        return {"a": 2.0, "b": 3.0}[name] + drift

    def choice(name: str) -> Choice:
        def launch(out):
            pass

        launch.__name__ = name
        return Choice(name, lambda args: launch)

    settings = TuningSettings(max_trials=8, time_budget_s=60.0, rounds=3)
    out = torch.zeros(1)
    winner = tune(
        "k", ("rounds",), [choice("a"), choice("b")], (out,), [False], settings, benchmark
    )
    assert winner.__name__ == "a"
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert torchkiln.counters["autotune"]["benchmarked"] == 2


def test_batched_timer_runs_short_kernels_in_batches():
    calls = []
    assert batched_min_ms(lambda: calls.append(1)) < 0.01
    assert len(calls) > 10  # one alone, then a batch of half a millisecond
    calls.clear()
    assert batched_min_ms(lambda: (calls.append(1), time.sleep(0.002))) >= 2.0
    assert len(calls) == 1  # a run longer than a batch is timed alone


def test_without_max_autotune_the_code_is_unchanged(monkeypatch):
    timed = favour(monkeypatch, "simdlen16")
    x = torch.randn(64, 512)
    plain = check(norm_softmax, x)
    assert plain.artifact.cpp_tuning is None
    assert timed == [] and not torchkiln.counters["autotune"]
    tuned = check(norm_softmax, x, **TUNED)
    assert tuned.artifact.cpp_source == plain.artifact.cpp_source  # the graph's own library
    assert tuned.artifact.wrapper_source == plain.artifact.wrapper_source
    assert len(timed) == len(CONFIGS) * 5


def test_kernels_with_nothing_to_choose_are_not_tuned(monkeypatch):
    """A small pointwise kernel runs serially whatever the config: no variant, no timing."""
    timed = favour(monkeypatch, "simdlen16")
    compiled = check(lambda x: (x * 2).exp(), torch.randn(4, 8), **TUNED)
    assert compiled.artifact.cpp_tuning is None
    assert timed == [] and not torchkiln.counters["autotune"]


def test_a_variant_that_does_not_compile_is_skipped(monkeypatch, caplog):
    """One variant's source made invalid: the others build (the variants' translation unit
    is built again in halves), are timed and one wins; results as eager's."""
    broken = "simdlen16-serial"

    def generate(plan, graph, simdlen, threads, parallel_threshold, serial=False):
        kernel = generate_kernel(plan, graph, simdlen, threads, parallel_threshold, serial)
        if (simdlen, serial) == (16, True):
            source = "#error a variant that does not compile\n" + kernel.source
            return GeneratedKernel(kernel.name, source, kernel.params)
        return kernel

    monkeypatch.setattr(cpp_variants, "generate_kernel", generate)
    timed = favour(monkeypatch, "simdlen8")
    monkeypatch.setattr(logs, "_enabled", {"autotune"})
    with caplog.at_level("INFO", logger="torchkiln"):
        compiled = check(norm_softmax, torch.randn(64, 512), **TUNED)
    assert torchkiln.counters["autotune"]["failed"] == 1
    assert torchkiln.counters["autotune"]["benchmarked"] == len(CONFIGS) - 1
    assert broken not in timed
    assert f"skipped {broken}: build failed" in caplog.text
    assert "a variant that does not compile" in caplog.text  # the compiler's error, logged
    assert list(winners(caplog).values()) == ["simdlen8"]
    assert compiled.artifact.cpp_tuning is not None


class Net(torch.nn.Module):
    """Row reductions (layer norm, softmax) and, in the backward, column ones (the bias
    gradients), each kernel over 2^15 elements."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 512)
        self.norm = torch.nn.LayerNorm(512)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm(self.lin(x)))
        return torch.softmax(h, -1), h.sum(0)


def _step(model, x, cotangents) -> list[torch.Tensor]:
    """Outputs, then the gradients of ``x`` and of the parameters (a loss linear in the
    outputs: no squaring that would amplify rounding)."""
    for p in (*model.parameters(), x):
        p.grad = None
    outs = model(x)
    sum((o * g.to(o.dtype)).sum() for o, g in zip(outs, cotangents, strict=True)).backward()
    return [*outs, x.grad, *(p.grad for p in model.parameters())]


def test_every_variant_matches_eager_forward_and_backward(tmp_path, monkeypatch, caplog):
    """Each config made the winner in turn (where a kernel has it): outputs and gradients
    as eager's to float tolerance, and as close to float64's (within twice eager's error
    and 4 ulps of the largest value; a variant with fewer lanes sums in another order, so
    not bit for bit). The graphs come from the plan cache after the first round, their
    libraries from this process's; the stored winners are dropped between rounds."""
    torch.manual_seed(0)
    model, eager, exact = Net(), Net(), Net().double()
    eager.load_state_dict(model.state_dict())
    exact.load_state_dict(model.state_dict())
    x = torch.randn(64, 64, requires_grad=True)
    cotangents = [torch.randn(64, 512), torch.randn(512)]
    expected = _step(eager, x.detach().clone().requires_grad_(), cotangents)
    reference = _step(exact, x.detach().double().requires_grad_(), cotangents)
    monkeypatch.setattr(logs, "_enabled", {"autotune"})
    for fast in CONFIGS:
        torchkiln.reset()
        monkeypatch.setattr(store, "_tuned", {})
        shutil.rmtree(tmp_path / "autotune", ignore_errors=True)
        favour(monkeypatch, fast)
        caplog.clear()
        compiled = torchkiln.compile(model, backend="inductor", options=TUNED)
        with caplog.at_level("INFO", logger="torchkiln"):
            actual = _step(compiled, x, cotangents)
        assert fast in winners(caplog).values(), fast  # forward or backward kernels
        for a, e, r in zip(actual, expected, reference, strict=True):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
            ulp = torch.finfo(torch.float32).eps * r.abs().max()
            eager_error = (e.double() - r).abs().max()
            assert (a.double() - r).abs().max() <= 2 * eager_error + 4 * ulp, fast


def softmax_and_sum(x):
    return torch.softmax(torch.nn.functional.layer_norm(x * 2, x.shape[-1:]), -1), x.sum(0)


#: max_autotune with two candidates: the heuristic, and the serial variant that wins
TWO = {"max_autotune": True, "autotune.max_trials": 2}

SECOND_PROCESS = textwrap.dedent(
    """
    import json, torch, torchkiln
    import torchkiln_inductor.cpp_build as b
    import torchkiln_inductor.autotune.cpp_kernels as k

    def refuse(*args):
        raise AssertionError("the second process compiled C++ or timed a candidate")

    b._build = k.benchmark = refuse

    def softmax_and_sum(x):
        return torch.softmax(torch.nn.functional.layer_norm(x * 2, x.shape[-1:]), -1), x.sum(0)

    x = torch.randn(64, 512)
    compiled = torchkiln.compile(softmax_and_sum, backend="inductor", options={options!r})
    torch.testing.assert_close(compiled(x), softmax_and_sum(x))
    print(json.dumps({{k: torchkiln.counters[k] for k in ("autotune", "aot_cache")}}))
    """
)


def test_second_process_compiles_and_benchmarks_nothing(tmp_path, monkeypatch):
    """Tuned here (a variant wins: the second process needs the variants' library), then
    in a second process with the same cache folder: the plan, the libraries and the
    winners come from disk, no compiler runs and nothing is timed."""
    favour(monkeypatch, "simdlen32-serial")
    x = torch.randn(64, 512)
    compiled = torchkiln.compile(softmax_and_sum, backend="inductor", options=TWO)
    torch.testing.assert_close(compiled(x), softmax_and_sum(x))
    first = dict(torchkiln.counters["autotune"])
    assert first["benchmarked"] == 4 and first["tuned"] == 2
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", SECOND_PROCESS.format(options=TWO)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    second = json.loads(out.stdout.strip().splitlines()[-1])
    assert second["aot_cache"]["hits"] > 0  # the plan, with its variants, unpickled
    second["autotune"].pop("build_ms")
    assert second["autotune"] == {"reused": 2}
