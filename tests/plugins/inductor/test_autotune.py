"""Measured choice of each Triton kernel's config, stored for the next process: max_autotune's
full search, and the default mode's light tuning of kernels with a reduction.

Triton's interpreter runs the kernels on CPU tensors (``TRITON_INTERPRET=1``), where timings
mean nothing: the tuner's choice is tested with a fake timer, the rest for what it must keep
(results as eager's, winners reused, failing configs skipped). Light tuning times nothing
on the interpreter unless a test gives it a timer (:func:`timed_in_order`). Shapes are tiny.
"""

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from types import SimpleNamespace

import pytest
import torch
from inductor_testing import check, needs_interpreter

import torchkiln
from torchkiln import logs
from torchkiln_inductor.autotune import configs, progress, store, triton_kernels
from torchkiln_inductor.autotune.tuner import (
    LIGHT_TUNING,
    Choice,
    TuningSettings,
    quick_gpu_median_ms,
    tune,
)
from torchkiln_inductor.options import MODE_OPTIONS, parse_options

pytest.importorskip("triton", reason="triton is not installed")

TUNED = {"cpu_backend": "triton", "max_autotune": True, "autotune.max_trials": 3}
SETTINGS = TuningSettings(max_trials=8, time_budget_s=60.0)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Winners of one test never reach another (nor the user's cache)."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(store, "_tuned", {})  # nor this process's
    torchkiln.counters.clear()


class FakeClock:
    """Time that passes only when a synthetic kernel says it ran."""

    def __init__(self):
        self.now = 0.0

    def benchmark(self, fn) -> float:
        start = self.now
        fn()
        return self.now - start


def synthetic(clock: FakeClock, name: str, cost_ms: float, ran: list, fail: str = "") -> Choice:
    def build(args):
        if fail == "build":
            raise RuntimeError("out of shared memory")

        def launch(out):
            if fail == "launch":
                raise RuntimeError("launch failed")
            clock.now += cost_ms
            out.fill_(cost_ms)
            ran.append(name)

        return launch

    return Choice(name, build)


def test_tuner_keeps_the_faster_of_two_configs():
    clock, ran = FakeClock(), []
    choices = [synthetic(clock, "slow", 5.0, ran), synthetic(clock, "fast", 2.0, ran)]
    out = torch.zeros(3)
    problem = ("synthetic", uuid.uuid4().hex)
    winner = tune("k", problem, choices, (out,), [False], SETTINGS, clock.benchmark)
    ran.clear()
    winner(out)
    assert ran == ["fast"] and out.tolist() == [2.0] * 3
    assert torchkiln.counters["autotune"]["benchmarked"] == 2
    assert {"build_ms", "measure_ms"} <= torchkiln.counters["autotune"].keys()  # where time went
    # the same problem again: the stored winner, nothing measured
    again = tune("k", problem, choices, (out,), [False], SETTINGS, clock.benchmark)
    ran.clear()
    again(out)
    assert ran == ["fast"] and torchkiln.counters["autotune"]["benchmarked"] == 2
    assert torchkiln.counters["autotune"]["reused"] == 1


def test_configs_that_fail_to_build_or_launch_are_skipped():
    clock, ran = FakeClock(), []
    choices = [
        synthetic(clock, "no-smem", 1.0, ran, fail="build"),
        synthetic(clock, "bad-launch", 1.0, ran, fail="launch"),
        synthetic(clock, "slow", 9.0, ran),
        synthetic(clock, "ok", 3.0, ran),
    ]
    winner = tune(
        "k", (uuid.uuid4().hex,), choices, (torch.zeros(2),), [False], SETTINGS, clock.benchmark
    )
    ran.clear()
    winner(torch.zeros(2))
    assert ran == ["ok"]
    assert torchkiln.counters["autotune"]["failed"] == 2


def test_benchmarks_write_into_copies_of_in_place_arguments():
    target, fresh = torch.zeros(4), torch.zeros(4)

    def build(args):
        def launch(acc, out):  # accumulates into ``acc``, as a scatter-add does
            acc.add_(1)
            out.copy_(acc)

        return launch

    winner = tune(
        "k", (uuid.uuid4().hex,), [Choice("add", build)], (target, fresh), [True, False], SETTINGS
    )
    assert target.tolist() == [0.0] * 4  # benchmark runs added into a copy
    winner(target, fresh)
    assert target.tolist() == fresh.tolist() == [1.0] * 4


def test_max_trials_and_time_budget_bound_the_measurements():
    clock, ran = FakeClock(), []
    choices = [synthetic(clock, f"c{i}", 10.0 - i, ran) for i in range(6)]
    args = (torch.zeros(1),)
    tune("k", ("trials",), choices, args, [False], TuningSettings(2, 60.0), clock.benchmark)
    assert torchkiln.counters["autotune"]["benchmarked"] == 2
    torchkiln.counters.clear()
    tune("k", ("budget",), choices, args, [False], TuningSettings(6, 0.0), clock.benchmark)
    assert torchkiln.counters["autotune"]["benchmarked"] == 1  # the first, then out of time


def test_progress_bar_and_candidate_log(monkeypatch, caplog):
    """A bar naming the kernel on a terminal's stderr, none with TORCHKILN_LOGS=quiet; the
    autotune log names each candidate with its time."""
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    terminal = io.StringIO()
    terminal.isatty = lambda: True
    monkeypatch.setattr(sys, "stderr", terminal)
    clock, ran = FakeClock(), []
    choices = [synthetic(clock, "a", 1.0, ran), synthetic(clock, "b", 2.0, ran)]
    monkeypatch.setattr(logs, "_enabled", {"autotune"})
    with caplog.at_level("INFO", logger="torchkiln"):
        tune("kiln_demo", ("bar",), choices, (torch.zeros(1),), [False], SETTINGS, clock.benchmark)
    assert "autotune kiln_demo" in terminal.getvalue()
    assert "kiln_demo a: 1.0000 ms" in caplog.text and "kiln_demo b: 2.0000 ms" in caplog.text
    monkeypatch.setattr(logs, "_enabled", {"quiet"})
    terminal.seek(0)
    terminal.truncate()
    tune("kiln_demo", ("quiet",), choices, (torch.zeros(1),), [False], SETTINGS, clock.benchmark)
    assert terminal.getvalue() == ""


@needs_interpreter
def test_candidates_vary_loop_blocks_and_keep_persistent_ones():
    def fn(x, y):
        return x.sum(1), torch.softmax(y, -1)

    # positive values to sum, as ``_three_inputs``: a row of randn summing near zero let a
    # config's order of sums miss the float32 tolerance (about 1 run in 12)
    compiled = check(fn, torch.rand(3, 5000), torch.randn(4, 8), **TUNED)
    launches = {k.rnumels: k for k in compiled.artifact.triton.launches}
    looped = launches[(("RBLOCK0", 5000),)]
    persistent = launches[(("RBLOCK0", 8),)]
    looped_configs = configs.candidates(looped)
    assert looped_configs[0] == configs.heuristic(looped)
    assert len({dict(c.meta)["RBLOCK0"] for c in looped_configs}) > 1
    assert {c.num_stages for c in looped_configs} > {None}
    assert {dict(c.meta)["RBLOCK0"] for c in configs.candidates(persistent)} == {8}
    assert torchkiln.counters["autotune"]["tuned"] == 2


@needs_interpreter
def test_a_real_config_that_fails_is_skipped(monkeypatch):
    """XBLOCK=3 is no power of two: Triton refuses it at launch; the other configs stay."""
    candidates = configs.candidates

    def with_a_bad_one(launch):
        good = candidates(launch)
        meta = {**dict(good[0].meta), "XBLOCK": 3}
        return [configs.TritonConfig(tuple(meta.items()), 4, None), *good]

    monkeypatch.setattr("torchkiln_inductor.autotune.triton_kernels.candidates", with_a_bad_one)
    check(lambda x: (x * 2).exp(), torch.randn(5, 7), **TUNED)
    assert torchkiln.counters["autotune"]["failed"] == 1
    assert torchkiln.counters["autotune"]["benchmarked"] == 2


class Net(torch.nn.Module):
    """Reductions persistent and looped, a batch norm's running stats updated in place, a
    scatter-add into a buffer the graph made (repeated indices: atomic adds)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 24)
        self.bn = torch.nn.BatchNorm1d(24)

    def forward(self, x, long, idx):
        h = torch.nn.functional.gelu(self.bn(self.lin(x)))
        bins = torch.zeros(6).index_add(0, idx, h.sum(1))
        return torch.softmax(h, -1), long.sum(1) * 0.5, bins


def _inputs():
    return torch.randn(8, 16), torch.randn(2, 4100, requires_grad=True), torch.tensor([0, 3] * 4)


def _train_step(model, inputs):
    outs = model(*inputs)
    sum(o.square().sum() for o in outs[:2]).backward()
    return outs


@needs_interpreter
def test_max_autotune_mode_matches_eager_with_tuning_on(monkeypatch):
    """mode="max-autotune-no-cudagraphs", CPU tensors sent through Triton's interpreter so that
    the kernels get tuned: outputs, gradients and the running stats as eager's."""
    monkeypatch.setitem(MODE_OPTIONS["max-autotune-no-cudagraphs"], "cpu_backend", "triton")
    monkeypatch.setitem(MODE_OPTIONS["max-autotune-no-cudagraphs"], "autotune.max_trials", 2)
    torch.manual_seed(0)
    model = Net()
    eager = Net()
    eager.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, backend="inductor", mode="max-autotune-no-cudagraphs")
    inputs = _inputs()
    twins = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    for _ in range(2):  # the second call runs the winners
        for p in (*model.parameters(), *eager.parameters(), inputs[1], twins[1]):
            p.grad = None
        actual, expected = _train_step(compiled, inputs), _train_step(eager, twins)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(inputs[1].grad, twins[1].grad)
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
        torch.testing.assert_close(model.bn.running_mean, eager.bn.running_mean)
        torch.testing.assert_close(model.bn.running_var, eager.bn.running_var)
    assert torchkiln.counters["autotune"]["tuned"] >= 4  # forward and backward kernels


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_max_autotune_modes_compile_and_run(mode):
    fn = torchkiln.compile(lambda x: torch.softmax(x, -1) * 2, backend="inductor", mode=mode)
    x = torch.randn(4, 8)
    torch.testing.assert_close(fn(x), torch.softmax(x, -1) * 2)


def test_autotune_options_parse():
    opts = parse_options({"max_autotune": True, "autotune.max_trials": 5})
    assert opts.max_autotune and opts.autotune_max_trials == 5


SCRIPT = textwrap.dedent(
    """
    import json, torch, torchkiln
    {setup}

    def fn(x):
        return torch.softmax(x, -1) * 2 + x.sum(0)

    x = torch.randn(4, 8)
    compiled = torchkiln.compile(fn, backend="inductor", options={options!r})
    torch.testing.assert_close(compiled(x), fn(x))
    print(json.dumps({{k: torchkiln.counters[k] for k in ("autotune", "aot_cache")}}))
    """
)


def _run(cache, options=TUNED, setup="") -> dict:
    """The script's ``autotune`` and ``aot_cache`` (plan cache) counters."""
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache), TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(options=options, setup=setup)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_benchmarks_nothing(tmp_path):
    first = _run(tmp_path)["autotune"]
    assert first["benchmarked"] > 0 and first["tuned"] > 0
    second = _run(tmp_path)["autotune"]
    second.pop("build_ms")  # building the stored winners takes time; measuring takes none
    assert second == {"reused": first["tuned"]}


# ---------------------------------------------------------------------------
# Light tuning (autotune.light, on by default)
# ---------------------------------------------------------------------------


#: light tuning as the default mode's, for kernels of any size: these tests' kernels are small
SMALL_LIGHT = dataclasses.replace(LIGHT_TUNING, min_elements=0)


@pytest.fixture
def light_tunes_small_kernels(monkeypatch):
    monkeypatch.setattr("torchkiln_inductor.compile_fx.LIGHT_TUNING", SMALL_LIGHT)


def three_kernels(x, y, z):
    """A looped reduction, a persistent one and a pointwise kernel."""
    return x.sum(1), torch.softmax(y, -1), (z * 2).exp()


def _three_inputs():
    # positive values to sum: no cancellation that a config's order of sums could magnify
    return torch.rand(3, 5000), torch.randn(4, 8), torch.randn(6, 7)


def timed_in_order(monkeypatch, step_ms: float) -> list:
    """Light tuning on the interpreter, each candidate timed ``step_ms`` slower than the one
    measured before it (faster where negative), so the test knows the winner; the list
    returned grows by one per candidate timed. Nothing runs: light tuning's 50 ms would not
    see the interpreter through one kernel's candidates."""
    timed = []

    def benchmark(fn) -> float:
        timed.append(fn)
        return 100.0 + step_ms * len(timed)

    monkeypatch.setattr(triton_kernels, "light_benchmark", lambda tensors: benchmark)
    return timed


def _reductions(compiled) -> list:
    return [k for k in compiled.artifact.triton.launches if k.rnumels]


@needs_interpreter
def test_default_options_light_tune_reductions_not_pointwise_kernels(
    light_tunes_small_kernels, monkeypatch
):
    timed = timed_in_order(monkeypatch, 1.0)
    compiled = check(three_kernels, *_three_inputs(), cpu_backend="triton")
    assert compiled.artifact.triton.autotune == SMALL_LIGHT
    reductions = _reductions(compiled)
    assert len(reductions) == 2 and len(compiled.artifact.triton.launches) == 3
    assert torchkiln.counters["autotune"]["tuned"] == 2
    light = sum(len(configs.light_candidates(k)) for k in reductions)
    assert len(timed) == torchkiln.counters["autotune"]["benchmarked"] == light


@needs_interpreter
def test_light_candidates_are_the_heuristic_twice_or_half_the_warps_and_each_loop_block_halved():
    compiled = check(three_kernels, *_three_inputs(), cpu_backend="triton")
    looped, persistent = sorted(_reductions(compiled), key=lambda k: -dict(k.rnumels)["RBLOCK0"])

    def changes(launch) -> list[tuple[str, float]]:
        """Per candidate after the first, the one setting it changes and by what factor."""
        first, *rest = configs.light_candidates(launch)
        assert first == configs.heuristic(launch)
        before = {**dict(first.meta), "warps": first.num_warps}
        out = []
        for c in rest:
            after = {**dict(c.meta), "warps": c.num_warps}
            (changed,) = [k for k in before if before[k] != after[k]]
            assert c.num_stages is None
            out.append((changed, after[changed] / before[changed]))
        assert len(set(out)) == len(out)
        return out

    assert changes(looped) == [("warps", 2.0), ("RBLOCK0", 0.5)]  # the loop's block may shrink
    assert changes(persistent) == [("warps", 2.0)]  # a persistent block holds a whole row
    assert len(configs.light_candidates(looped)) < len(configs.candidates(looped))
    # a program per row, the row held whole (the chain's softmax, a layer norm): half the warps
    row = SimpleNamespace(meta=(("XBLOCK", 1), ("RBLOCK0", 4096)), rnumels=(("RBLOCK0", 4096),))
    assert changes(SimpleNamespace(**vars(row), num_warps=8)) == [("warps", 2.0), ("warps", 0.5)]
    assert changes(SimpleNamespace(**vars(row), num_warps=1)) == [("warps", 2.0)]


def test_light_tuning_leaves_small_kernels_to_the_heuristic():
    """Kernels under LIGHT_TUNING.min_elements (outer times inner elements) are not tuned;
    max_autotune tunes every kernel."""
    fn = SimpleNamespace(name="kernel")

    def launch(name: str, xnumel: int, rnumel: int | None) -> SimpleNamespace:
        rnumels = (("RBLOCK0", rnumel),) if rnumel else ()
        return SimpleNamespace(name=name, xnumel=xnumel, rnumels=rnumels, size_params=())

    threshold = LIGHT_TUNING.min_elements
    launches = (
        launch("small_rows", 1024, 1024),
        launch("large_rows", threshold // 1024, 1024),
        launch("large_pointwise", threshold, None),
    )
    module = SimpleNamespace(**{k.name: fn for k in launches})
    light = triton_kernels.tuned_launchers(module, launches, LIGHT_TUNING, {})
    assert list(light) == ["large_rows"]
    full = triton_kernels.tuned_launchers(module, launches, SETTINGS, {})
    assert list(full) == ["small_rows", "large_rows", "large_pointwise"]


@needs_interpreter
@pytest.mark.parametrize("step_ms, expected", [(1.0, 0), (-1.0, -1)], ids=["first", "last"])
def test_light_tuning_keeps_the_fastest_candidate(
    light_tunes_small_kernels, monkeypatch, caplog, step_ms, expected
):
    timed_in_order(monkeypatch, step_ms)
    monkeypatch.setattr(logs, "_enabled", {"autotune"})
    inputs = _three_inputs()
    with caplog.at_level("INFO", logger="torchkiln"):
        compiled = check(three_kernels, *inputs, cpu_backend="triton")
    winners = dict(re.findall(r"(kiln_\w+): winner (\S+)", caplog.text))
    reductions = _reductions(compiled)
    assert winners == {k.name: configs.light_candidates(k)[expected].name for k in reductions}
    for actual, wanted in zip(compiled(*inputs), three_kernels(*inputs), strict=True):
        torch.testing.assert_close(actual, wanted)  # the winners run now


@needs_interpreter
def test_stored_light_winners_are_reused_without_benchmarking(
    light_tunes_small_kernels, monkeypatch
):
    timed = timed_in_order(monkeypatch, -1.0)
    inputs = _three_inputs()
    check(three_kernels, *inputs, cpu_backend="triton")
    assert torchkiln.counters["autotune"]["tuned"] == 2
    monkeypatch.setattr(store, "_tuned", {})  # as in a new process: the winners on disk only
    torchkiln.counters.clear()
    timed.clear()
    check(three_kernels, *inputs, cpu_backend="triton")  # generated and loaded afresh
    assert dict(torchkiln.counters["autotune"]).keys() == {"reused", "build_ms"}
    assert torchkiln.counters["autotune"]["reused"] == 2 and timed == []


@needs_interpreter
def test_tuned_configs_compile_in_the_graph_s_worker_batch():
    """One worker job per candidate config, light tuning's or max_autotune's, sent with the
    graph's other kernels at its load: the first call then only loads them."""
    compiled = check(three_kernels, *_three_inputs(), cpu_backend="triton")
    looped = max(_reductions(compiled), key=lambda k: dict(k.rnumels)["RBLOCK0"])
    compiled_fn = SimpleNamespace(fn=three_kernels)  # what a job reads of a JIT function
    jobs = triton_kernels.TunedKernel(compiled_fn, looped, LIGHT_TUNING, {}).worker_jobs()
    light = configs.light_candidates(looped)
    assert [(j.meta, j.num_warps) for j in jobs] == [(c.meta, c.num_warps) for c in light]
    jobs = triton_kernels.TunedKernel(compiled_fn, looped, SETTINGS, {}).worker_jobs()
    full = configs.candidates(looped)[: SETTINGS.max_trials]
    assert len(full) > len(light)
    assert [(j.meta, j.num_warps, j.num_stages) for j in jobs] == [
        (c.meta, c.num_warps, c.num_stages) for c in full
    ]


def test_second_process_light_tunes_nothing(tmp_path):
    """The plan cache's TritonModule keeps the light settings; the winners come from disk."""
    setup = (
        "import dataclasses, torchkiln_inductor.autotune.triton_kernels as k, "
        "torchkiln_inductor.autotune.tuner as t, torchkiln_inductor.compile_fx as c; "
        "k.light_benchmark = lambda tensors: t.wall_median_ms; "
        "c.LIGHT_TUNING = dataclasses.replace(t.LIGHT_TUNING, min_elements=0)"
    )
    first = _run(tmp_path, {"cpu_backend": "triton"}, setup)["autotune"]
    assert first["benchmarked"] > 0 and first["tuned"] > 0
    second = _run(tmp_path, {"cpu_backend": "triton"}, setup)
    assert second["aot_cache"]["hits"] > 0  # the plan, unpickled
    second["autotune"].pop("build_ms")
    assert second["autotune"] == {"reused": first["tuned"]}


@needs_interpreter
def test_light_tuning_times_nothing_on_the_interpreter_or_when_off(monkeypatch):
    check(three_kernels, *_three_inputs(), cpu_backend="triton")  # no timer off the GPU
    assert not torchkiln.counters["autotune"]
    timed = timed_in_order(monkeypatch, 1.0)
    check(three_kernels, *_three_inputs(), cpu_backend="triton", **{"autotune.light": False})
    assert not torchkiln.counters["autotune"] and timed == []
    assert parse_options({}).autotune_light is True


@needs_interpreter
def test_max_autotune_keeps_its_full_search(monkeypatch):
    """Every kernel, pointwise too, over max_trials candidates (beyond the light set), timed
    by the full search's timer, not light tuning's."""
    timed = timed_in_order(monkeypatch, 1.0)
    options = {"cpu_backend": "triton", "max_autotune": True, "autotune.max_trials": 5}
    compiled = check(three_kernels, *_three_inputs(), **options)
    launches = compiled.artifact.triton.launches
    assert torchkiln.counters["autotune"]["tuned"] == len(launches) == 3
    full = sum(min(5, len(configs.candidates(k))) for k in launches)
    assert torchkiln.counters["autotune"]["benchmarked"] == full
    assert full > sum(len(configs.light_candidates(k)) for k in launches)
    assert timed == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA launches")
def test_quick_gpu_benchmark_times_at_most_10_ms_of_launches():
    """An untimed launch, then up to 5 timed: one for a kernel of over 10 ms."""
    x = torch.ones(2**28, device="cuda")  # 1 GiB: 60 passes take over 10 ms (8 TB/s: 16 ms)
    launches = []

    def kernel(passes: int) -> None:
        launches.append(passes)
        for _ in range(passes):
            x.mul_(1.0)

    kernel(1)  # CUDA loads a kernel's module at its first launch: milliseconds
    torch.cuda.synchronize()
    launches.clear()
    assert quick_gpu_median_ms(lambda: kernel(1), x.device) > 0
    assert len(launches) == 6
    launches.clear()
    assert quick_gpu_median_ms(lambda: kernel(60), x.device) > 10
    assert len(launches) == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA launches")
def test_quick_gpu_benchmark_times_the_kernel_not_the_host_that_launches_it():
    """A kernel of microseconds whose launch takes the host half a millisecond: timed at
    the host's pace, each run would take 0.5 ms."""
    x = torch.ones(1024, device="cuda")

    def slow_launch() -> None:
        time.sleep(5e-4)
        x.add_(1.0)

    assert quick_gpu_median_ms(slow_launch, x.device) < 0.1
