"""The DDP/FSDP2 benchmark still runs: tiny nanogpt, 2 gloo processes, eager and kiln:aot_eager.

Benchmarks are not tests: this checks the report's structure and that every configuration
trained like eager (the benchmark's own comparison), and asserts no speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def distributed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("distributed")
    cmd = [
        sys.executable, "-m", "benchmarks.distributed", "--device", "cpu", "--size", "tiny",
        "--nproc", "2", "--models", "nanogpt", "--variants", "kiln:aot_eager",
        "--warmup", "1", "--reps", "2", "--json", str(out / "out.json"),
        "--markdown", str(out / "out.md"), "--collective-timeout", "60",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "out.json").read_text()), (out / "out.md").read_text()


def test_every_wrapper_and_variant_trained_like_eager(distributed_run: tuple[dict, str]):
    document, _ = distributed_run
    rows = document["rows"]
    assert [(r["wrapper"], r["variant"]) for r in rows] == [
        ("ddp", "eager"), ("ddp", "kiln:aot_eager"),
        ("fsdp2", "eager"), ("fsdp2", "kiln:aot_eager"),
    ]  # fmt: skip
    for r in rows:
        assert r["status"] == "ok", r["error"] + r["error_detail"]
        assert len(r["rank_step_ms"]) == 2 and r["step_ms"] == max(r["rank_step_ms"])
        assert r["speedup"] > 0
    for r in rows[1::2]:  # compiled: the losses and every parameter after 3 steps
        assert r["max_diff"] < 1e-4
        assert r["graph_breaks"] == 0


def test_report_states_the_goal_per_compiled_row(distributed_run: tuple[dict, str]):
    document, markdown = distributed_run
    assert document["goals"] == [
        "nanogpt ddp: kiln:aot_eager: INCOMPLETE (torch.compile: not run)",
        "nanogpt fsdp2: kiln:aot_eager: INCOMPLETE (torch.compile: not run)",
    ]
    assert "| nanogpt | fsdp2   | kiln:aot_eager |" in markdown
