"""The benchmark harness still runs: one tiny model, eager and torchkiln's eager, valid JSON out.

Benchmarks are not tests; this only keeps the harness from rotting. It
times nothing and asserts no speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MISSING_BACKEND = "kiln:no_such_backend"
COMPILED = "kiln:eager"


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "out.json"
    cmd = [
        sys.executable, "-m", "benchmarks.run", "--device", "cpu", "--size", "tiny",
        "--quick", "--no-warm", "--models", "mlp", "--backends", f"eager,{COMPILED},{MISSING_BACKEND}",
        "--reps", "3", "--warmup", "0", "--json", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def _rows(document: dict, variant: str) -> list[dict]:
    return [r for r in document["rows"] if r["variant"] == variant]


def test_eager_rows_run_for_both_cases(harness_run: tuple[dict, str]) -> None:
    document, _ = harness_run
    rows = _rows(document, "eager")
    assert {(r["model"], r["case"]) for r in rows} == {("mlp", "inference"), ("mlp", "training")}
    assert all(r["status"] == "ok" and r["median_ms"] > 0 and r["reps"] == 3 for r in rows)


def test_failing_backend_is_reported_and_the_run_goes_on(harness_run: tuple[dict, str]) -> None:
    document, _ = harness_run
    rows = _rows(document, MISSING_BACKEND)
    assert len(rows) == 2
    assert all(r["status"] == "failed" and "no_such_backend" in r["error"] for r in rows)


def test_json_has_overhead_and_geomeans(harness_run: tuple[dict, str]) -> None:
    document, _ = harness_run
    assert document["overhead_us"]["eager"]["ok"]
    assert set(document["geomean_speedup"]) == {"inference", "training"}
    assert document["meta"]["variants"] == ["eager", COMPILED, MISSING_BACKEND]


def test_compiled_rows_are_timed_paired_with_eager(harness_run: tuple[dict, str]) -> None:
    document, stdout = harness_run
    rows = _rows(document, COMPILED)
    assert len(rows) == 2 and document["meta"]["paired"]
    for r in rows:
        assert r["status"] == "ok" and r["paired_reps"] == 3 and r["paired_eager_ms"] > 0
        assert r["speedup"] == r["paired_speedup"] and r["unpaired_speedup"] > 0
    assert all(r["paired_speedup"] is None for r in _rows(document, "eager"))
    assert "Paired speedups" in stdout


def test_table_is_printed(harness_run: tuple[dict, str]) -> None:
    _, stdout = harness_run
    assert "### Speedup over eager" in stdout
    assert "| mlp " in stdout


def test_show_prints_the_tables_from_the_json(
    harness_run: tuple[dict, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.show import main

    document, _ = harness_run
    path = tmp_path / "again.json"
    path.write_text(json.dumps(document))
    assert main([str(path)]) == 0
    assert "### Speedup over eager" in capsys.readouterr().out


@pytest.mark.slow  # two worker processes: over the smoke test's 60 s on a loaded host
def test_a_worker_that_dies_costs_only_the_item_it_was_on(tmp_path: Path) -> None:
    from benchmarks.supervise import supervise

    items = [{"kind": "no_such_kind"}, {"kind": "overhead", "variant": "eager", "calls": 1}]
    config = {"device": "cpu", "dtype": "float32", "size": "tiny", "threads": 1, "warmup": 0,
              "reps": 1, "step_budget_s": 1.0, "row_budget_s": 60.0, "cache_root": str(tmp_path)}  # fmt: skip
    results: dict[int, dict] = {}
    supervise(items, config, tmp_path, "test", results.__setitem__)
    assert "crashed: worker exited with code 1" in results[0]["error"]
    assert results[1]["ok"]
