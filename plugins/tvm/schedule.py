"""A default CPU schedule for the kernels no tuning record covers.

TVM's CPU pipeline leaves kernels as plain loops, and dlight's CPU rules (``GEMV``,
``Reduction``) take matrix-vector products and row reductions only; most of a graph's
time is in its matmuls and convolutions, whose plain loops run the reduction innermost
(a strided walk down a column). :class:`LoopOrder` gives each block a fixed schedule:

- a multiply-accumulate block (spatial loops, then reduction loops, reading two or more
  buffers: matmuls, convolutions): the last spatial loop split by the vector lanes (the
  most, a power of two, that divide it) and
  the one before it by :data:`ROWS`, the reduction loops moved between them and the
  lanes, the lanes vectorized and the rows unrolled (``ROWS`` x lanes accumulators that
  reuse each loaded operand);
- an injective block: its loops fused and split by the vector lanes, the lanes vectorized.

Loops that fewer than 4 lanes divide, and blocks that write booleans, are left as they
are. A block that a step does not fit keeps its loops (a failed schedule primitive
changes nothing).
"""

from __future__ import annotations

import tvm
from tvm import relax, s_tir, tirx
from tvm.relax.backend.cpu_generic import pipeline as cpu
from tvm.s_tir import dlight
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import get_extent
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule
from tvm.target import Target
from tvm.target.codegen import llvm_get_vector_width

#: Rows of the output a multiply-accumulate block computes at once.
ROWS = 4

#: Fewer vector lanes than this are not worth a vector loop.
MIN_LANES = 4


def cpu_pipeline(
    target: Target, *, database=None, default_schedule: bool = True
) -> tvm.transform.Pass:
    """TVM's CPU pipeline (``relax.backend.cpu_generic.pipeline``), with two steps after fusion:
    the kernels ``database`` has a record of take its best schedule (MetaSchedule's
    ``ApplyDatabase``), then the others :class:`LoopOrder`'s (``default_schedule``)."""

    @tvm.transform.module_pass(opt_level=0)
    def pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        passes = [*cpu.library_dispatch_passes(target), *cpu.legalize_passes(target)]
        if database is not None:
            passes.append(relax.transform.MetaScheduleApplyDatabase())
        if default_schedule:
            passes.append(dlight.ApplyDefaultSchedule(LoopOrder()))
        passes += cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)
        with target:
            if database is None:
                return tvm.transform.Sequential(passes)(mod)
            with database:
                return tvm.transform.Sequential(passes)(mod)

    return pipeline


class LoopOrder(CPUScheduleRule):
    """The default schedule (see the module's docstring); ``None`` where nothing fits."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        bits = llvm_get_vector_width(target)
        changed = False
        for info in infos:
            block = sch.get(info.block_rv)
            # TVM's LLVM codegen fails on vectors of bool (it casts them from int8 vectors)
            if len(block.writes) != 1 or block.writes[0].source.dtype == "bool":
                continue
            lanes = max(1, bits // block.writes[0].source.dtype.bits) if bits > 0 else 1
            kinds = info.dom_kind()
            try:
                if info.is_injective():
                    changed |= _vectorize(sch, info, lanes)
                elif _is_multiply_accumulate(kinds, block):
                    changed |= _tile_rows(sch, info, kinds.count("S"), lanes)
            except s_tir.ScheduleError:
                continue
        return sch if changed else None


def _is_multiply_accumulate(kinds: str, block: tirx.SBlock) -> bool:
    written = {w.source for w in block.writes}
    inputs = {r.source for r in block.reads} - written
    spatial = len(kinds) - len(kinds.lstrip("S"))
    return spatial >= 2 and set(kinds[spatial:]) == {"R"} and len(inputs) >= 2


def _lanes(extent, lanes: int) -> int:
    """The most lanes, a power of two up to ``lanes``, that divide ``extent`` (0: fewer
    than :data:`MIN_LANES` do)."""
    if not isinstance(extent, int):
        return 0
    while lanes >= MIN_LANES and extent % lanes:
        lanes //= 2
    return lanes if lanes >= MIN_LANES else 0


def _vectorize(sch: s_tir.Schedule, info, lanes: int) -> bool:
    loops = sch.get_loops(info.block_rv)
    if not loops:
        return False
    loop = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    extent = get_extent(sch, loop)
    lanes = _lanes(extent, lanes)
    if not lanes or extent == lanes:
        return False
    _, inner = sch.split(loop, [None, lanes])
    sch.vectorize(inner)
    return True


def _tile_rows(sch: s_tir.Schedule, info, spatial: int, lanes: int) -> bool:
    loops = sch.get_loops(info.block_rv)
    *outer, rows, cols = loops[:spatial]
    reduction = loops[spatial:]
    row_extent = get_extent(sch, rows)
    lanes = _lanes(get_extent(sch, cols), lanes)
    if not lanes:
        return False
    cols_out, cols_in = sch.split(cols, [None, lanes])
    if isinstance(row_extent, int) and row_extent % ROWS == 0 and row_extent > ROWS:
        rows_out, rows_in = sch.split(rows, [None, ROWS])
        sch.reorder(*outer, rows_out, cols_out, *reduction, rows_in, cols_in)
    else:
        rows_in = None
        sch.reorder(*outer, rows, cols_out, *reduction, cols_in)
    # vectorized before the init is split off: the update block alone is no reduction
    # block (it has no init), which ``vectorize`` refuses
    sch.vectorize(cols_in)
    if rows_in is not None:
        sch.unroll(rows_in)
    init = sch.decompose_reduction(info.block_rv, reduction[0])
    sch.vectorize(sch.get_loops(init)[-1])
    return True
