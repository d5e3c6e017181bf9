"""MetaSchedule tuning (``tuning_trials``, ``mode="max-autotune"``): tuned graphs match
eager, the time budget holds, a candidate that hangs or fails is skipped, and a second
process reads the records and tunes nothing.

Each test tunes a one-kernel graph for a few candidates (seconds, not minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import torchkiln
from torchkiln.exc import BackendCompilerFailed, BackendUnavailable, InvalidOptionError

pytest.importorskip("tvm", reason="the tvm backend needs apache-tvm: pip install 'torchkiln[tvm]'")

from torchkiln_tvm import measure, tuning

needs_ffi = pytest.mark.skipif(
    tuning.tvm_ffi.__version__ != tuning.FFI_VERSION,
    reason=f"tuning segfaults unless apache-tvm-ffi=={tuning.FFI_VERSION}",
)

#: What the budget may be overrun by: the search of the round under way when the deadline
#: passes (MetaSchedule's search can't be interrupted) and committing its records.
SLACK_S = 3.0


def fn(x, w):
    return torch.tanh(x @ w) + 1


#: Options that keep ``fn``'s matmul a TVM kernel, the one kernel tuned.
TVM_MATMUL = {"extern_ops": False}


def args():
    return torch.randn(16, 32), torch.randn(32, 8)


@pytest.fixture
def tvm_counters():
    torchkiln.counters["tvm"].clear()
    yield torchkiln.counters["tvm"]
    torchkiln.counters["tvm"].clear()


@pytest.fixture
def timed_tuning(monkeypatch):
    """The seconds each ``tuning.tune`` call took."""
    took = []
    tune = tuning.tune

    def timed(*a, **k):
        start = time.monotonic()
        try:
            return tune(*a, **k)
        finally:
            took.append(time.monotonic() - start)

    monkeypatch.setattr(tuning, "tune", timed)
    return took


@needs_ffi
def test_a_tuned_graph_matches_eager(tmp_path, tvm_counters):
    options = {**TVM_MATMUL, "tuning_trials": 6, "cache_dir": str(tmp_path)}
    compiled = torchkiln.compile(fn, backend="tvm", options=options)
    x, w = args()
    torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert tvm_counters["tuning_trials"] == 6
    assert tvm_counters["tuning_failed_trials"] == 0
    x, w = args()
    torch.testing.assert_close(compiled(x, w), fn(x, w))


@needs_ffi
def test_the_time_budget_holds(tmp_path, tvm_counters, timed_tuning):
    budget = 4
    options = {
        **TVM_MATMUL,
        "tuning_trials": 10_000,
        "tuning_time_budget_s": budget,
        "cache_dir": str(tmp_path),
    }
    compiled = torchkiln.compile(fn, backend="tvm", options=options)
    x, w = args()
    torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert len(timed_tuning) == 1
    assert timed_tuning[0] <= budget + SLACK_S
    assert tvm_counters["tuning_trials"] < 10_000


@needs_ffi
def test_tuning_leaves_torch_kernels_out(tmp_path, monkeypatch):
    """With ``extern_ops`` (the default) the matmul is a call of torch's kernel, no TIR
    kernel: the tasks are the softmax's."""
    tasks = []
    tune = tuning.tune
    monkeypatch.setattr(
        tuning, "tune", lambda ts, *a: tasks.extend(t.task_name for t in ts) or tune(ts, *a)
    )

    def attention_scores(x, w):
        return torch.softmax(x @ w, dim=-1)

    options = {"tuning_trials": 2, "cache_dir": str(tmp_path)}
    compiled = torchkiln.compile(attention_scores, backend="tvm", options=options)
    x, w = args()
    torch.testing.assert_close(compiled(x, w), attention_scores(x, w))
    assert tasks and not any("matmul" in name for name in tasks), tasks


def fake_worker(tmp_path, how: str) -> list[str]:
    """A worker whose second request, the first candidate after the default schedule,
    hangs (``how="hang"``) or fails (``"fail"``), and that times every other one at 1 ms
    (it counts requests in a file, so that its restart after a hang goes on counting; the
    warm-up is answered and not counted)."""
    count = tmp_path / "requests"
    script = textwrap.dedent(
        f"""
        import json, os, sys, time
        for line in sys.stdin:
            if "warm_up" in json.loads(line):
                print(json.dumps({{"seconds": []}}), flush=True)
                continue
            path = {str(count)!r}
            n = int(open(path).read()) + 1 if os.path.exists(path) else 1
            open(path, "w").write(str(n))
            answer = {{"seconds": [0.001]}}
            if n == 2:
                if {how!r} == "hang":
                    time.sleep(600)
                answer = {{"error": "RuntimeError: this candidate does not build"}}
            print(json.dumps(answer), flush=True)
        """
    )
    return [sys.executable, "-c", script]


def tune_four_candidates(worker: list[str], tmp_path, monkeypatch) -> None:
    """Tune ``fn`` for 4 candidates measured by ``worker``, each timed out after 1 s; the
    result must match eager."""
    monkeypatch.setattr(measure, "WORKER_COMMAND", worker)
    monkeypatch.setattr(tuning, "CANDIDATE_TIMEOUT_S", 1.0)
    options = {**TVM_MATMUL, "tuning_trials": 4, "cache_dir": str(tmp_path / "records")}
    compiled = torchkiln.compile(fn, backend="tvm", options=options)
    x, w = args()
    torch.testing.assert_close(compiled(x, w), fn(x, w))


@needs_ffi
@pytest.mark.parametrize("how", ["hang", "fail"])
def test_a_candidate_that_hangs_or_fails_is_skipped(
    tmp_path, how, monkeypatch, tvm_counters, timed_tuning
):
    tune_four_candidates(fake_worker(tmp_path, how), tmp_path, monkeypatch)
    assert tvm_counters["tuning_trials"] == 4
    assert tvm_counters["tuning_failed_trials"] == 1
    assert timed_tuning[0] < 60  # the hung candidate cost its timeout, not its 600 s


def slow_starting_worker(seconds: float) -> list[str]:
    """A worker that takes ``seconds`` to start (TVM's import, a CUDA context), then
    answers every request at once."""
    script = textwrap.dedent(
        f"""
        import json, sys, time
        time.sleep({seconds})
        for line in sys.stdin:
            print(json.dumps({{"seconds": [0.001]}}), flush=True)
        """
    )
    return [sys.executable, "-c", script]


@needs_ffi
def test_the_worker_starts_before_the_first_candidate_s_timeout_runs(
    tmp_path, monkeypatch, tvm_counters
):
    """Its start used to count against the default schedule's measurement: that failed,
    and tuning then replaced the default with slower candidates (CUDA: softmax 3.2x)."""
    tune_four_candidates(slow_starting_worker(2.0), tmp_path, monkeypatch)
    assert tvm_counters["tuning_trials"] == 4
    assert tvm_counters["tuning_failed_trials"] == 0


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import torchkiln

    def fn(x, w):
        return torch.tanh(x @ w) + 1

    options = {"extern_ops": False, "tuning_trials": 4, "cache_dir": sys.argv[1]}
    compiled = torchkiln.compile(fn, backend="tvm", options=options)
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    torch.testing.assert_close(compiled(x, w), fn(x, w))
    print(json.dumps(dict(torchkiln.counters["tvm"])))
    """
)


def run(records, plans) -> dict:
    """Compile and run ``fn`` tuned in a new process (plan cache ``plans``): its counters."""
    env = dict(os.environ, TORCHKILN_CACHE_DIR=str(plans))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(records)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_ffi
def test_a_second_process_reads_the_records_and_tunes_nothing(tmp_path):
    cold = run(tmp_path / "records", tmp_path / "plans-1")
    assert cold["tuning_trials"] == 4 and cold["kernels_from_records"] == 0
    assert (tmp_path / "records" / "database_tuning_record.json").stat().st_size > 0
    # a plan cache of its own, so that it builds the graph again, from the records
    warm = run(tmp_path / "records", tmp_path / "plans-2")
    assert warm.get("tuning_trials", 0) == 0
    assert warm["kernels_from_records"] == 1


def test_max_autotune_tunes_within_a_stated_budget():
    options = torchkiln.registry.lookup_backend("tvm").modes["max-autotune"]
    assert options["tuning_trials"] > 0 and options["tuning_time_budget_s"] > 0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tuning_trials": -1}, "tuning_trials"),
        ({"tuning_trials": 8, "tuning_time_budget_s": -5}, "tuning_time_budget_s"),
        ({"tuning_trials": 8, "tuning_time_budget_s": "60"}, "tuning_time_budget_s"),
    ],
)
def test_bad_tuning_values_are_refused(options, message):
    with pytest.raises(InvalidOptionError, match=message):
        torchkiln.compile(fn, backend="tvm", options=options)


@pytest.mark.parametrize("options", [{"tuning_time_budget_s": 10}, {"cache_dir": "/tmp/x"}])
def test_tuning_options_without_trials_are_refused(options):
    compiled = torchkiln.compile(fn, backend="tvm", options=options)
    with pytest.raises(BackendCompilerFailed, match="pass tuning_trials > 0"):
        compiled(*args())


def test_another_tvm_ffi_is_refused_before_it_segfaults(monkeypatch):
    monkeypatch.setattr(tuning.tvm_ffi, "__version__", "0.1.15.post2")
    compiled = torchkiln.compile(fn, backend="tvm", options={"tuning_trials": 4})
    with pytest.raises((BackendUnavailable, BackendCompilerFailed), match="apache-tvm-ffi=="):
        compiled(*args())
