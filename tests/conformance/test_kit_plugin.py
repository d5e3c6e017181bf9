"""``pytest -p torchkiln.testing --kiln-backend NAME`` from a folder of its own, on fixture backends.

The folder's conftest registers two third-party backends, as a plugin package's tests
would: ``broken_fixture`` gets tanh wrong, hands out one buffer for every result and
declares an option its compile function does not take; ``partial_fixture`` runs
add and mul only; ``wrong_grad_fixture`` returns eager's outputs with twice their
gradients. The kit must report each failure, and what it partitioned away.
"""

import os
import subprocess
import sys

import pytest

from torchkiln import disk_cache
from torchkiln.testing import Check, checks, kit_params

FIXTURE_BACKENDS = """
import torch
from torchkiln.plugin import Backend, Capabilities, Option
from torchkiln.registry import register_backend


def broken(gm, example_inputs):
    wrong = any("tanh" in str(node.target) for node in gm.graph.nodes)
    buffers = {}

    def run(*args):
        outs = []
        for i, out in enumerate(gm(*args)):
            if isinstance(out, torch.Tensor) and out.is_floating_point() and not out.requires_grad:
                if wrong:
                    out = out + 1
                buf = buffers.setdefault((i, out.shape, out.dtype), torch.empty_like(out))
                out = buf.copy_(out)
            outs.append(out)
        return outs

    return run


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def wrong_grad(gm, example_inputs):
    return lambda *args: [Doubled.apply(out) for out in gm(*args)]


register_backend(Backend("wrong_grad_fixture", wrong_grad))
register_backend(
    Backend("broken_fixture", broken, options=(Option("fast", False, "unused", type=bool),))
)
register_backend(
    Backend(
        "partial_fixture",
        capabilities=Capabilities(
            compile_partition=lambda gm, example_inputs: gm.forward,
            ops={torch.ops.aten.add, torch.ops.aten.mul},
        ),
    )
)
"""


def test_the_kit_reports_a_broken_backend_and_what_it_partitioned_away(tmp_path):
    (tmp_path / "conftest.py").write_text(FIXTURE_BACKENDS)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "torchkiln.testing",
            "-p",
            "no:cacheprovider",
            "--kiln-backend",
            "broken_fixture",
            "--kiln-backend",
            "partial_fixture",
            "--kiln-backend",
            "wrong_grad_fixture",
            "-k",
            "ops/add or ops/tanh or ops/exp or results-do-not-alias or options/defaults "
            "or grads/mul or grads/tanh",
            "--tb=no",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "TORCHKILN_CACHE_DIR": str(tmp_path / "cache")},
        timeout=300,
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    report = out[out.index("torchkiln conformance report") :]
    broken = report[report.index("backend 'broken_fixture'") : report.index("backend 'partial")]
    partial = report[report.index("backend 'partial_fixture'") : report.index("backend 'wrong")]
    wrong_grad = report[report.index("backend 'wrong_grad_fixture'") :]
    assert "broken_fixture': 3 failed, 4 passed" in broken
    failed = broken[broken.index("  failed:") :]
    assert "ops/tanh: AssertionError: tanh torch.float32" in failed
    assert "semantics/results-do-not-alias-across-calls: AssertionError" in failed
    assert "options/defaults: torchkiln.exc.BackendCompilerFailed" in failed
    assert "unexpected keyword argument 'fast'" in failed
    assert "partial_fixture': 6 passed" in partial
    assert "exp.default (partial_fixture: not among its ops): in ops/exp" in partial
    assert "tanh.default (partial_fixture: not among its ops): in ops/tanh, grads/tanh" in partial
    assert "wrong_grad_fixture': 2 failed, 4 passed" in wrong_grad
    assert "grads/mul: AssertionError: mul gradient" in wrong_grad


def test_slow_checks_are_marked_and_the_fast_subset_covers_every_group():
    found = checks("eager")
    fast = {c.id.split("/")[0] for c in found if not c.slow}
    assert fast == {"ops", "grads", "models", "semantics"}
    assert any(c.slow for c in found)


def test_known_failures_must_name_existing_checks():
    with pytest.raises(ValueError, match=r"does not have: \['ops/no_such_op'\]"):
        kit_params("eager", xfail={"ops/no_such_op": "why"})


@pytest.mark.parametrize("op", ["bitwise_and", "narrow"])
def test_integer_ops_and_samples_that_break_the_graph_are_checked_not_failed(op):
    """``bitwise_and`` has no float32 sample: it is checked in int64. One sample of
    ``narrow`` takes its start as a tensor, read with ``.item()``: the graph breaks before
    the only op and nothing reaches the backend; that sample is compared, not counted."""
    pytest.importorskip("expecttest", reason="OpInfo needs expecttest")
    (check,) = [c for c in checks("eager") if c.id == f"ops/{op}"]
    check.run()


def test_checks_read_no_cache_another_process_left(tmp_path, monkeypatch):
    """A plan an earlier run stored (a graph whose compile failed is stored as the graph run
    instead, and loads without the warning) would hide what this run's compile does: the
    checks share a cache folder of this process's own."""
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    seen = []
    probe = Check("eager", "probe", lambda _target: seen.append(disk_cache.cache_dir()))
    probe.run()
    probe.run()
    assert seen[0] == seen[1] != tmp_path
    assert disk_cache.cache_dir() == tmp_path
