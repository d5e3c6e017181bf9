"""``benchmarks.compile_phases`` still runs: its phases are found, timed, and counted once."""

import pytest

from benchmarks import compile_phases


def test_a_phase_counts_nested_and_overlapping_calls_once():
    clock = compile_phases.PhaseClock()
    phase = "AOT trace"
    clock.intervals[phase] = [(0.0, 2.0), (0.5, 1.0), (1.5, 3.0), (5.0, 6.0)]
    assert clock.seconds()[phase] == pytest.approx(4.0)


def test_a_cold_training_step_is_split_into_its_phases(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))  # cold: nothing compiled before
    result = compile_phases.child("mlp", "kiln:inductor", "training", "cpu", "tiny", sample=5)
    phases = result["phases"]
    for phase in ("capture (bytecode to FX)", "AOT trace", "AOT partition"):
        assert phases[phase] > 0, phase
    assert phases["backward compile (at first backward)"] > 0
    assert result["first"] > result["steady"] > 0
    assert result["samples"]  # the main thread's stack was sampled


def test_the_timed_functions_are_put_back():
    from torchkiln.aot import api, partition

    before = partition.min_cut_partition, api.min_cut_partition
    clock = compile_phases.PhaseClock()
    clock.install()
    assert partition.min_cut_partition is not before[0]
    assert api.min_cut_partition is partition.min_cut_partition  # the copy imported too
    clock.uninstall()
    assert (partition.min_cut_partition, api.min_cut_partition) == before


def test_a_phase_function_imported_after_the_clock_is_timed(monkeypatch, tmp_path):
    """The backend's modules are imported by the first step, as torch.compile's are: the
    clock wraps their functions as they load."""
    import sys

    (tmp_path / "late_phase_module.py").write_text("def work():\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(compile_phases, "PHASES", {"late": ["late_phase_module:work"]})
    clock = compile_phases.PhaseClock()
    clock.install()
    try:
        import late_phase_module

        assert late_phase_module.work() == 7
        assert len(clock.intervals["late"]) == 1
    finally:
        clock.uninstall()
        sys.modules.pop("late_phase_module", None)
    assert not hasattr(late_phase_module.work, "__wrapped__")  # put back
    assert clock._hook not in sys.meta_path


def test_the_sample_lists_the_busiest_functions_and_those_busy_on_their_own():
    import collections

    sampler = compile_phases.StackSampler(0)
    sampler.samples = 10
    sampler.inclusive = collections.Counter({"step": 10, "compile": 9, "wait": 2, "hash": 1})
    sampler.own = collections.Counter({"compile": 3, "wait": 2, "hash": 1})
    assert sampler.top(2) == [("step", 1.0, 0.0), ("compile", 0.9, 0.3), ("wait", 0.2, 0.2)]
