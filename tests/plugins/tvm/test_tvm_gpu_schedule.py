"""The tvm backend's CUDA pipeline, checked without a GPU: every kernel gets a GPU
schedule (dlight's rules, a failing rule passing the kernel on), tuning uses MetaSchedule's
rules without tensor cores, and CPU-only options are refused for CUDA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln.exc import BackendCompilerFailed, InvalidOptionError

pytest.importorskip("tvm", reason="the tvm backend needs apache-tvm: pip install 'torchkiln[tvm]'")

import tvm
from tvm import tirx

from torchkiln_tvm import compiler, gpu_schedule, targets, tuning

#: An H100/H200 as TVM describes it (``Target.from_device`` needs the GPU itself).
HOPPER = tvm.target.Target(
    {
        "kind": "cuda",
        "arch": "sm_90",
        "max_threads_per_block": 1024,
        "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32,
        "max_num_threads": 1024,
    }
)


def chain(x, w, b):
    y = F.gelu(x * w + b)
    return torch.softmax(F.layer_norm(y, y.shape[-1:]), dim=-1)


def chain_module(dtype=torch.bfloat16) -> tvm.IRModule:
    args = [
        torch.randn(64, 256, dtype=dtype),
        torch.randn(256, dtype=dtype),
        torch.randn(256, dtype=dtype),
    ]
    gm = make_fx(chain, decomposition_table=compiler.decompositions())(*args)
    return compiler.to_relax(gm)[0]


class Raises:
    def apply(self, func, target, tunable):
        raise AssertionError("misjudged")


class Takes:
    def apply(self, func, target, tunable):
        return "schedule"


def test_a_rule_that_raises_passes_the_kernel_on():
    assert gpu_schedule.Tried(Raises()).apply(None, HOPPER, False) is None
    assert gpu_schedule.Tried(Takes()).apply(None, HOPPER, False) == "schedule"


def test_every_kernel_of_a_layer_norm_and_softmax_gets_a_gpu_schedule():
    """On apache-tvm 0.27 dlight's GEMV rule asserts on these kernels (TVM's own CUDA
    pipeline fails on this graph)."""
    with tvm.transform.PassContext(opt_level=3):
        lowered = gpu_schedule.gpu_pipeline(HOPPER)(chain_module())
    kernels = [f for f in lowered.functions.values() if isinstance(f, tirx.PrimFunc)]
    assert kernels
    for kernel in kernels:
        assert kernel.attrs["tirx.is_scheduled"], kernel
        assert "threadIdx.x" in kernel.script(), kernel.script()


def test_cuda_kernels_are_tuned_with_the_rules_without_tensor_cores():
    space = tuning.design_space(HOPPER)
    assert isinstance(space, tvm.s_tir.meta_schedule.space_generator.PostOrderApply)
    assert tuning.design_space(tvm.target.Target("llvm")) == "post-order-apply"


def test_the_tuned_cuda_kernels_are_the_ones_the_build_looks_up():
    """Tuning's tasks come from the CUDA passes, and a task's default schedule is the
    build's (dlight's) one."""
    fused = tuning.fused(chain_module(), HOPPER)
    tasks = [f for f in fused.functions.values() if isinstance(f, tirx.PrimFunc)]
    reducing = [f for f in tasks if tuning.reduces(f)]
    assert reducing
    for func in reducing:
        sch = tuning.default_schedule(func, HOPPER)
        assert sch is not None and "threadIdx.x" in sch.mod.script()


@pytest.mark.parametrize("option", ["default_schedule", "fast_math"])
def test_cpu_only_options_turned_off_for_cuda_are_refused(option, monkeypatch):
    monkeypatch.setattr(targets, "resolve", lambda target, device: HOPPER)
    with pytest.raises(InvalidOptionError, match=f"option '{option}' .* CPU targets only"):
        compiler.check_options({"target": "cuda", option: False})
    compiled = torchkiln.compile(
        lambda x: x.exp() + 1, backend="tvm", options={"target": "cuda", option: False}
    )
    with pytest.raises(BackendCompilerFailed, match=f"option '{option}'"):
        compiled(torch.randn(4))
