"""The dynamic-shapes benchmark still runs: tiny GPT-2, a few lengths, eager and kiln:eager.

Benchmarks are not tests: this checks the report's structure and that the
compile counts are sane, and asserts no speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.dynamic import main

pytest.importorskip("transformers", reason="hf_gpt2 needs transformers (the models extra)")

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_LENGTH = 24
LENGTHS = {"inference": 3, "training": 2}


@pytest.fixture(scope="module")
def dynamic_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str]:
    out = tmp_path_factory.mktemp("dynamic")
    cmd = [
        sys.executable, "-m", "benchmarks.dynamic", "--device", "cpu", "--size", "tiny",
        "--lengths", "3", "--train-lengths", "2", "--max-length", str(MAX_LENGTH),
        "--reps", "1", "--backends", "kiln:eager", "--json", str(out / "out.json"),
        "--markdown", str(out / "out.md"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = json.loads((out / "out.json").read_text())
    return document, proc.stdout, (out / "out.md").read_text()


def test_every_backend_and_case_ran_on_the_same_lengths(dynamic_run: tuple[dict, str, str]):
    document, _, _ = dynamic_run
    results = document["results"]
    assert [(r["backend"], r["case"]) for r in results] == [
        ("eager", "inference"), ("kiln:eager", "inference"),
        ("eager", "training"), ("kiln:eager", "training"),
    ]  # fmt: skip
    for r in results:
        assert r["status"] == "ok", r["error"]
        assert r["lengths"] == document["meta"]["lengths"][r["case"]]
        assert len(set(r["lengths"])) == LENGTHS[r["case"]]
        assert all(1 <= n <= MAX_LENGTH for n in r["lengths"])
        assert len(r["first_call_s"]) == len(r["steady_s"]) == len(r["lengths"])
        assert r["us_per_token"] > 0


def test_compile_counts_are_sane(dynamic_run: tuple[dict, str, str]):
    document, _, _ = dynamic_run
    for r in document["results"]:
        if r["backend"] == "eager":
            assert (r["compiles"], r["first_call_compiles"], r["compiles_per_frame"]) == (
                0,
                0,
                None,
            )
            assert r["x_eager"] == 1
            continue
        # each frame at least once, at most once per length
        assert 1 <= r["first_call_compiles"] <= r["compiles"] + r["specializations"]
        assert r["compiles_per_frame"] <= len(r["lengths"])
        assert r["x_eager"] > 0 and r["x_torch_compile"] is None


def _table(markdown: str) -> list[list[str]]:
    """The cells of the report's markdown table, the separator line left out."""
    rows = [line.strip("|").split("|") for line in markdown.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows if not set(row[0]) <= {"-", " "}]


def test_the_report_has_the_table_and_the_targets(dynamic_run: tuple[dict, str, str]):
    document, stdout, markdown = dynamic_run
    assert stdout.strip() == markdown.strip()
    header, *body = _table(markdown)
    assert header == ["backend", "case", "compiles", "compile s", "steady µs/token", "x eager",
                      "x torch.compile"]  # fmt: skip
    results = {(r["backend"], r["case"]): r for r in document["results"]}
    assert [tuple(row[:2]) for row in body] == list(results)
    for backend, case, compiles, *_ in body:
        r = results[backend, case]
        assert compiles == (
            "-" if backend == "eager" else f"{r['compiles']} + {r['specializations']}"
        )
    targets = document["targets"]
    assert [t.split(": ")[0] for t in targets] == ["kiln:eager inference", "kiln:eager training"]
    assert all("INCOMPLETE" in t and "no torch.compile result" in t for t in targets)
    assert all(f"- {t}" in markdown for t in targets)


def test_more_lengths_than_the_range_holds_is_refused(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        main(["--lengths", "40", "--max-length", "32"])
    assert "--lengths 40: give 1 to --max-length (32) distinct lengths" in capsys.readouterr().err
