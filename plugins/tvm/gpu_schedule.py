"""The CUDA pipeline: TVM's own, with dlight's GPU rules made safe to try, and tuned kernels.

TVM's CUDA pipeline (``relax.backend.cuda.pipeline``) schedules each fused kernel with
the first of dlight's GPU rules that takes it (``Matmul``, ``GEMV``, ``Reduction``,
``GeneralReduction``, ``Fallback``). A rule can take a kernel it then fails on: on
apache-tvm 0.27, ``GEMV`` asserts (``assert s_loops``) on the row reductions of a layer
norm or a softmax, and the whole build fails with it. Here each rule is :class:`Tried`:
one that raises passes the kernel on to the next rule, as if it had declined it.
Kernels with a tuning record take MetaSchedule's schedule first (``database``).
"""

from __future__ import annotations

import logging

import tvm
from torchkiln_tvm.schedule import run_passes
from tvm import relax, s_tir, tirx
from tvm.relax.backend.cuda import pipeline as cuda
from tvm.s_tir import dlight
from tvm.s_tir.dlight.base import ScheduleRule
from tvm.target import Target

log = logging.getLogger("torchkiln.tvm")


class Tried(ScheduleRule):
    """``rule``, declining (``None``) the kernels it raises on."""

    def __init__(self, rule: ScheduleRule):
        self.rule = rule

    def apply(
        self, func: tirx.PrimFunc, target: Target, tunable: bool
    ) -> s_tir.Schedule | list[s_tir.Schedule] | None:
        try:
            return self.rule.apply(func, target, tunable)
        except Exception as e:  # dlight's analyses assert on kernels they misjudge
            log.debug("tvm: dlight's %s declined a kernel: %r", type(self.rule).__name__, e)
            return None


def default_rules() -> list[ScheduleRule]:
    """dlight's GPU rules in TVM's order, each :class:`Tried`."""
    rules = (
        dlight.gpu.Matmul(),
        dlight.gpu.GEMV(),
        dlight.gpu.Reduction(),
        dlight.gpu.GeneralReduction(),
        dlight.gpu.Fallback(),
    )
    return [Tried(rule) for rule in rules]


def kernel_passes(target: Target) -> list[tvm.transform.Pass]:
    """TVM's CUDA passes up to its fused TIR kernels: tuning takes its tasks from the
    kernels the build looks up."""
    return [
        *cuda.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def gpu_pipeline(target: Target, *, database=None) -> tvm.transform.Pass:
    """TVM's CUDA pipeline with :func:`default_rules`; the kernels ``database`` has a
    record of take their best schedule first (MetaSchedule's ``ApplyDatabase``)."""

    @tvm.transform.module_pass(opt_level=0)
    def pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        passes = kernel_passes(target)
        if database is not None:
            passes.append(relax.transform.MetaScheduleApplyDatabase())
        passes.append(dlight.ApplyDefaultSchedule(*default_rules()))
        passes += cuda.dataflow_lower_passes(target) + cuda.finalize_passes(target)
        return run_passes(mod, passes, target, database)

    return pipeline
