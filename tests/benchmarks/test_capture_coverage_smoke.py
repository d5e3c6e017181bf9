"""The capture-coverage harness still runs: three programs of its own corpus, valid JSON out.

A benchmark, not a test of torchkiln: this asserts no capture rate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.capture_coverage.compare import assert_same

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_runner_classifies_three_programs(tmp_path: Path) -> None:
    out = tmp_path / "coverage.json"
    cmd = [sys.executable, "-m", "benchmarks.capture_coverage", "--filter", r"^basics\.",
           "--json", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = json.loads(out.read_text())
    programs = document["programs"]
    assert set(programs) == {"basics.add_mul", "basics.mutate_input", "basics.list_of_tensors"}
    assert sum(document["summary"]["counts"].values()) == 3
    assert all(r["status"] != "eager-error" for r in programs.values())
    assert "captured-correct among the" in proc.stdout


def test_a_wrong_output_or_mutation_is_caught() -> None:
    x = torch.randn(3)
    assert_same((x, [x]), (x.clone(), [x.clone()]))
    with pytest.raises(AssertionError, match=r"output\[1\]\[0\]"):
        assert_same((x, [x]), (x, [x + 1]), "output")
    with pytest.raises(AssertionError, match="type list, eager gives tuple"):
        assert_same((x,), [x])
