"""max_autotune: measured choice of each Triton kernel's config, stored for the next process.

Triton's interpreter runs the kernels on CPU tensors (``TRITON_INTERPRET=1``), where timings
mean nothing: the tuner's choice is tested with a fake timer, the rest for what it must keep
(results as eager's, winners reused, failing configs skipped). Shapes are tiny.
"""

import io
import json
import os
import subprocess
import sys
import textwrap
import uuid

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: the kernels run on CPU

import pytest
import torch
from inductor_testing import check

import torchkiln
from torchkiln import logs
from torchkiln_inductor.autotune import configs, progress
from torchkiln_inductor.autotune.tuner import Choice, TuningSettings, tune
from torchkiln_inductor.options import MODE_OPTIONS, parse_options

pytest.importorskip("triton", reason="triton is not installed")

TUNED = {"cpu_backend": "triton", "max_autotune": True, "autotune.max_trials": 3}
SETTINGS = TuningSettings(max_trials=8, time_budget_s=60.0)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Winners of one test never reach another (nor the user's cache)."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
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


def test_candidates_vary_loop_blocks_and_keep_persistent_ones():
    def fn(x, y):
        return x.sum(1), torch.softmax(y, -1)

    compiled = check(fn, torch.randn(3, 5000), torch.randn(4, 8), **TUNED)
    launches = {k.rnumels: k for k in compiled.artifact.triton.launches}
    looped = launches[(("RBLOCK0", 5000),)]
    persistent = launches[(("RBLOCK0", 8),)]
    looped_configs = configs.candidates(looped)
    assert looped_configs[0] == configs.heuristic(looped)
    assert len({dict(c.meta)["RBLOCK0"] for c in looped_configs}) > 1
    assert {c.num_stages for c in looped_configs} > {None}
    assert {dict(c.meta)["RBLOCK0"] for c in configs.candidates(persistent)} == {8}
    assert torchkiln.counters["autotune"]["tuned"] == 2


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

    def fn(x):
        return torch.softmax(x, -1) * 2 + x.sum(0)

    x = torch.randn(4, 8)
    compiled = torchkiln.compile(fn, backend="inductor", options={options!r})
    torch.testing.assert_close(compiled(x), fn(x))
    print(json.dumps(dict(torchkiln.counters["autotune"])))
    """
)


def _run(cache) -> dict:
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(cache), TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(options=TUNED)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_benchmarks_nothing(tmp_path):
    first = _run(tmp_path)
    assert first["benchmarked"] > 0 and first["tuned"] > 0
    second = _run(tmp_path)
    second.pop("build_ms")  # building the stored winners takes time; measuring takes none
    assert second == {"reused": first["tuned"]}
