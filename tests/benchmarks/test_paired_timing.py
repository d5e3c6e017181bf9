"""Paired timing: a non-eager row is timed alternately with a fresh eager copy of its model.

The rows here run in-process on tiny models whose steps sleep for a known
time, so that a speedup has a known value on any host.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from benchmarks.caches import reset_compilers
from benchmarks.models import Built
from benchmarks.results import OK, Row
from benchmarks.rows import RowRunner, Settings
from benchmarks.run import parse_args, relate_to_eager, worker_config
from benchmarks.tables import details_table, speedup_note, speedup_table
from benchmarks.variants import EAGER, Variant


class Sleepy(torch.nn.Module):
    """A linear layer whose forward first sleeps ``sleep_s``: eager steps of a known length."""

    def __init__(self, sleep_s: float):
        super().__init__()
        self.sleep_s = sleep_s
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return self.linear(x)


@dataclass(frozen=True)
class SleepVariant(Variant):
    """A stand-in for a compiler: sleeps ``sleep_s`` instead of the model's own sleep."""

    sleep_s: float = 0.0

    def compile(self, fn: Callable) -> Callable:
        def step(x: torch.Tensor) -> torch.Tensor:
            time.sleep(self.sleep_s)
            return fn.linear(x)

        return step


def sleepy(sleep_s: float) -> Built:
    torch.manual_seed(0)
    return Built(Sleepy(sleep_s), (torch.randn(4, 8),))


def runner(tmp_path: Path, paired: bool = True) -> RowRunner:
    settings = Settings(torch.device("cpu"), torch.float32, 1, 10, 5.0, tmp_path, paired)
    return RowRunner(settings)


@pytest.mark.parametrize("case", ["inference", "training"])
def test_a_compiled_row_is_timed_alternately_with_an_eager_copy(tmp_path: Path, case: str) -> None:
    row = runner(tmp_path).run("sleepy", sleepy(0.001), case, SleepVariant("fake", "fake"), 60)
    assert row.status == OK, row.error
    assert row.paired_reps == 10 and not row.paired_error
    assert row.paired_ms > 0 and row.paired_eager_ms > 0 and row.paired_speedup > 0


@pytest.mark.parametrize(("eager_s", "variant_s"), [(0.01, 0.02), (0.02, 0.01)])
def test_a_controlled_slowdown_shows_as_that_ratio(
    tmp_path: Path, eager_s: float, variant_s: float
) -> None:
    variant = SleepVariant("fake", "fake", sleep_s=variant_s)
    row = runner(tmp_path).run("sleepy", sleepy(eager_s), "inference", variant, 60)
    relate_to_eager([row])
    assert row.speedup == row.paired_speedup == pytest.approx(eager_s / variant_s, rel=0.2)


def test_eager_rows_have_no_paired_timing(tmp_path: Path) -> None:
    row = runner(tmp_path).run("sleepy", sleepy(0.0), "inference", Variant(EAGER, EAGER), 60)
    assert row.status == OK
    assert (row.paired_ms, row.paired_eager_ms, row.paired_speedup, row.paired_reps) == (
        None, None, None, 0,
    )  # fmt: skip


def test_no_paired_leaves_the_paired_timing_out(tmp_path: Path) -> None:
    assert worker_config(parse_args([]), tmp_path)["paired"]
    assert not worker_config(parse_args(["--no-paired"]), tmp_path)["paired"]
    variant = SleepVariant("fake", "fake")
    row = runner(tmp_path, paired=False).run("sleepy", sleepy(0.0), "inference", variant, 60)
    assert row.status == OK and row.median_ms > 0
    assert (row.paired_ms, row.paired_eager_ms, row.paired_speedup) == (None, None, None)
    assert not row.paired_error


def test_a_row_whose_budget_runs_out_while_paired_keeps_its_own_numbers(tmp_path: Path) -> None:
    # The variant's own steps take no time; the eager copy's 12 steps take 2.4 s.
    built, variant = sleepy(0.2), SleepVariant("fake", "fake")
    reset_compilers()  # imports dynamo before the row's budget starts
    row = runner(tmp_path).run("sleepy", built, "inference", variant, 1.0)
    eager = Row("sleepy", "inference", EAGER, OK, median_ms=100.0)
    relate_to_eager([eager, row])
    assert row.status == OK and row.median_ms > 0
    assert row.paired_speedup is None
    assert row.paired_error.startswith("paired: RowTimeout")
    assert row.speedup == row.unpaired_speedup == 100.0 / row.median_ms


def cells(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]


def rows_one_paired_one_not() -> list[Row]:
    return [
        Row("m", "inference", EAGER, OK, median_ms=10.0),
        Row("m", "inference", "a", OK, median_ms=5.0, paired_ms=8.0, paired_eager_ms=6.0,
            paired_speedup=0.75, paired_reps=20),
        Row("m", "inference", "b", OK, median_ms=4.0, paired_error="paired: RowTimeout: ..."),
    ]  # fmt: skip


def test_the_tables_use_the_paired_ratio_where_a_row_has_one() -> None:
    rows = rows_one_paired_one_not()
    relate_to_eager(rows)
    _, paired, unpaired = rows
    assert (paired.speedup, paired.unpaired_speedup) == (0.75, 2.0)
    assert unpaired.speedup == unpaired.unpaired_speedup == 2.5
    table = cells(speedup_table(rows, [EAGER, "a", "b"]))
    assert ["m", "inference", "10", "0.75x", "2.5x*"] in table
    assert ["geomean", "inference", "", "0.75x (1/1)", "2.5x (1/1)"] in table
    assert "`*`: no paired timing" in speedup_note(rows)
    details = details_table(rows)
    assert ["m", "inference", "a", "5", "0", "8 / 6 (20)", "0.75x", "2x", "-", "-", "-"] in (
        cells(details)
    )
    assert "- m/inference b: paired: RowTimeout: ..." in details.splitlines()


def test_the_note_says_when_no_speedup_is_paired() -> None:
    rows = [
        Row("m", "inference", EAGER, OK, median_ms=10.0),
        Row("m", "inference", "a", OK, median_ms=5.0),
    ]
    assert speedup_note(rows).startswith("Unpaired speedups")
    assert speedup_note(rows_one_paired_one_not()[:2]).startswith("Paired speedups")
