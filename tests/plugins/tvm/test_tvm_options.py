"""The tvm backend's record and options: declared, checked, each one doing what it says."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import torchkiln
from tests.plugins.tvm.tvm_checks import assert_all_in_tvm, partition_log
from torchkiln.exc import BackendCompilerFailed, BackendUnavailable
from torchkiln.registry import ensure_usable, lookup_backend


def fn(x, w):
    return torch.tanh(x @ w) + 1


def test_tvm_is_listed_experimental_with_its_options():
    assert "tvm" not in torchkiln.list_backends()
    assert "tvm" in torchkiln.list_backends(experimental=True)
    record = lookup_backend("tvm")
    assert "experimental" in record.tags
    assert set(record.option_schema()) == {
        "target",
        "opt_level",
        "default_schedule",
        "extern_ops",
        "fast_math",
        "cache_dir",
        "tuning_trials",
        "tuning_time_budget_s",
    }


def test_a_missing_tvm_names_the_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tvm" else find_spec(name, *a)
    )
    with pytest.raises(BackendUnavailable, match=r"pip install 'torchkiln\[tvm\]'"):
        ensure_usable(lookup_backend("tvm"))


@pytest.mark.parametrize(
    "options",
    [{"target": "llvm", "opt_level": 0}, {"target": '{"kind": "llvm", "mcpu": "x86-64"}'}],
)
def test_target_and_opt_level_build_what_they_name(options, caplog):
    pytest.importorskip("tvm", reason="needs apache-tvm: pip install 'torchkiln[tvm]'")
    compiled = torchkiln.compile(fn, backend="tvm", options=options)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    with partition_log(caplog):
        torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert_all_in_tvm(caplog.text)


def test_an_unknown_target_is_refused():
    pytest.importorskip("tvm", reason="needs apache-tvm: pip install 'torchkiln[tvm]'")
    compiled = torchkiln.compile(fn, backend="tvm", options={"target": "metal"})
    with pytest.raises(BackendCompilerFailed, match="InvalidOptionError: option 'target'"):
        compiled(torch.randn(4, 8), torch.randn(8, 3))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_says_why():
    pytest.importorskip("tvm", reason="needs apache-tvm: pip install 'torchkiln[tvm]'")
    compiled = torchkiln.compile(fn, backend="tvm", options={"target": "cuda"})
    with pytest.raises(BackendCompilerFailed, match="can't build for CUDA"):
        compiled(torch.randn(4, 8), torch.randn(8, 3))


@pytest.mark.parametrize("default_schedule", [True, False])
def test_default_schedule_schedules_the_cpu_kernels(default_schedule, monkeypatch, tmp_path):
    pytest.importorskip("tvm", reason="needs apache-tvm: pip install 'torchkiln[tvm]'")
    from torchkiln_tvm import schedule

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))  # build, don't load the plan
    scheduled = []
    apply = schedule.LoopOrder.apply
    monkeypatch.setattr(
        schedule.LoopOrder, "apply", lambda *a: scheduled.append(apply(*a)) or scheduled[-1]
    )
    options = {"default_schedule": default_schedule}
    compiled = torchkiln.compile(fn, backend="tvm", options=options)
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    torch.testing.assert_close(compiled(x, w), fn(x, w))
    assert any(s is not None for s in scheduled) == default_schedule


def test_default_schedule_builds_kernels_that_write_booleans(caplog):
    """A mask written by one kernel and read by two (an attention mask): TVM's LLVM codegen
    fails on a vectorized boolean store, so the default schedule leaves it scalar."""

    def masks(i, j, m):
        mask = (m & (i == j)).expand(2, 1, 64, 64)
        zero, low = torch.tensor(0.0), torch.tensor(-torch.inf)
        return torch.where(mask, zero, low), torch.where(mask, zero, low)

    compiled = torchkiln.compile(masks, backend="tvm")
    i, j = torch.randint(0, 3, (2, 1, 64, 1)), torch.randint(0, 3, (2, 1, 1, 64))
    m = torch.rand(1, 1, 64, 64) > 0.5
    with partition_log(caplog):
        torch.testing.assert_close(compiled(i, j, m), masks(i, j, m))
    assert_all_in_tvm(caplog.text)


def test_default_schedule_vectorizes_a_matmul_fused_with_nothing():
    """A matmul kernel of its own (a language model's head, ``extern_ops=False``): its
    lanes are vectorized (they were not, and with no other block to schedule it kept
    TVM's plain loops: 20 ms against 0.4 ms for 256x128 @ 128x512)."""
    pytest.importorskip("tvm", reason="needs apache-tvm: pip install 'torchkiln[tvm]'")
    import tvm
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchkiln_tvm import schedule, targets, tuning
    from torchkiln_tvm.compiler import to_relax

    mod, _ = to_relax(make_fx(torch.mm)(torch.randn(256, 128), torch.randn(128, 512)))
    target = targets.host()
    (kernel,) = [
        f for f in tuning.fused(mod, target).functions.values() if isinstance(f, tvm.tirx.PrimFunc)
    ]
    scheduled = schedule.LoopOrder().apply(kernel, target, False)
    assert scheduled is not None
    assert scheduled.mod.script().count("T.vectorized") == 2  # the products and the zeros
