"""A default CPU schedule for the kernels no tuning record covers.

TVM's CPU pipeline leaves kernels as plain loops, and dlight's CPU rules (``GEMV``,
``Reduction``) take matrix-vector products and row reductions only; most of a graph's
time is in its matmuls and convolutions, whose plain loops run the reduction innermost
(a strided walk down a column). :class:`LoopOrder` first inlines a kernel's intermediate
elementwise blocks (fusion leaves each op a block of its own), then schedules a row
reduction (softmax, norms, sums over trailing axes) as a whole, and otherwise each block:

- a row reduction: each reduction split by the vector lanes into lane-wise partial
  results (``rfactor``, vectorized), every block computed at the row loop (a row's
  intermediates stay in cache), the elementwise blocks vectorized;
- a multiply-accumulate block (spatial loops, then reduction loops, reading two or more
  buffers: matmuls, convolutions): the last spatial loop split by the vector lanes (the
  most, a power of two, that divide it) and
  the one before it by :data:`ROWS`, the reduction loops moved between them and the
  lanes, the lanes vectorized and the rows unrolled (``ROWS`` x lanes accumulators that
  reuse each loaded operand);
- an injective block: its loops fused and split by the vector lanes that divide its
  innermost loop, the lanes vectorized.

Loops that fewer than 4 lanes divide, and blocks that write booleans, are left as they
are. A block that a step does not fit keeps its loops (a failed schedule primitive
changes nothing).
"""

from __future__ import annotations

import math

import tvm
from torchkiln_tvm import fastmath
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


def kernel_passes(target: Target, *, fast_math: bool = True) -> list[tvm.transform.Pass]:
    """TVM's CPU passes up to its fused TIR kernels (``relax.backend.cpu_generic``'s
    dispatch and legalization), ``fast_math``: with :func:`torchkiln_tvm.fastmath.legalize`.
    Tuning takes its tasks from the same kernels the build looks up."""
    legalize = fastmath.legalize() if fast_math else relax.transform.LegalizeOps()
    return [
        *cpu.library_dispatch_passes(target),
        legalize,
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def cpu_pipeline(
    target: Target, *, database=None, default_schedule: bool = True, fast_math: bool = True
) -> tvm.transform.Pass:
    """TVM's CPU pipeline (``relax.backend.cpu_generic.pipeline``), with two steps after fusion:
    the kernels ``database`` has a record of take its best schedule (MetaSchedule's
    ``ApplyDatabase``), then the others :class:`LoopOrder`'s (``default_schedule``)."""

    @tvm.transform.module_pass(opt_level=0)
    def pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        passes = kernel_passes(target, fast_math=fast_math)
        if database is not None:
            passes.append(relax.transform.MetaScheduleApplyDatabase())
        if default_schedule:
            passes.append(dlight.ApplyDefaultSchedule(LoopOrder()))
        passes += cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)
        return run_passes(mod, passes, target, database)

    return pipeline


def run_passes(mod: tvm.IRModule, passes: list, target: Target, database=None) -> tvm.IRModule:
    """``passes`` over ``mod`` for ``target``, with ``database``'s records to look kernels up
    in (MetaSchedule's ``ApplyDatabase`` reads the current database)."""
    with target:
        if database is None:
            return tvm.transform.Sequential(passes)(mod)
        with database:
            return tvm.transform.Sequential(passes)(mod)


class LoopOrder(CPUScheduleRule):
    """The default schedule (see the module's docstring); ``None`` where nothing fits."""

    def apply(self, func: tirx.PrimFunc, target: Target, _tunable: bool) -> s_tir.Schedule | None:
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        bits = llvm_get_vector_width(target)
        rows = s_tir.Schedule(func)
        try:
            if _reduce_rows(rows, bits):
                return rows
        except s_tir.ScheduleError:
            pass
        sch = s_tir.Schedule(func)
        changed = _inline_elementwise(sch)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        for info in infos:
            block = sch.get(info.block_rv)
            # TVM's LLVM codegen fails on vectors of bool (it casts them from int8 vectors)
            if len(block.writes) != 1 or block.writes[0].source.dtype == "bool":
                continue
            lanes = _vector_lanes(block, bits)
            kinds = info.dom_kind()
            try:
                if info.is_injective():
                    changed |= _vectorize(sch, info, lanes)
                elif _is_multiply_accumulate(kinds, block):
                    changed |= _tile_rows(sch, info, kinds.count("S"), lanes)
            except s_tir.ScheduleError:
                continue
        return sch if changed else None


def _vector_lanes(block: tirx.SBlock, bits: int) -> int:
    """The lanes of a vector register of the dtype ``block`` writes (1: no vectors)."""
    return max(1, bits // block.writes[0].source.dtype.bits) if bits > 0 else 1


def _inline_elementwise(sch: s_tir.Schedule) -> bool:
    """Inline the intermediate injective blocks that span the kernel's whole iteration
    space (an elementwise chain), so that the chain is one pass over memory instead of one
    a block (a layer norm's last kernel: 36 -> 7 us, 64x1024). Smaller ones (a row's
    ``rsqrt`` of its variance), and ones read by two blocks (softmax's ``exp``), stay
    apart: computed once, not once an element or a reader."""
    infos = normalize_prim_func(sch)
    if infos is None:
        return False
    size = max(_domain(info) for info in infos)
    inlined = False
    for info in infos[:-1]:
        single = len(sch.get_consumers(info.block_rv)) == 1
        if info.is_injective() and single and _domain(info) == size:
            try:
                sch.compute_inline(info.block_rv)
                inlined = True
            except s_tir.ScheduleError:
                continue
    return inlined


def _domain(info) -> int:
    """The iterations of a block (0: not known)."""
    extents = [it.dom for it in info.iters]
    if not all(isinstance(e, (int, tirx.IntImm)) for e in extents):
        return 0
    return math.prod(int(e) for e in extents)


def _leading_spatial(kinds: str) -> int:
    return len(kinds) - len(kinds.lstrip("S"))


def _reduce_rows(sch: s_tir.Schedule, bits: int) -> bool:
    """Schedule a row reduction (softmax, norms, sums: blocks that reduce trailing axes
    and injective blocks, all over the same leading "row" axes), else ``False``.

    The intermediate injective blocks are inlined; each reduction is split by the vector
    lanes and ``rfactor``-ed into a block of lane-wise partial results (vectorized) and
    one that adds the lanes up; every block is computed at the last block's row loop,
    so that a row's intermediates stay in cache; the injective blocks are vectorized.
    """
    infos = normalize_prim_func(sch)
    if infos is None or not any("R" in info.dom_kind() for info in infos):
        return False
    _inline_elementwise(sch)
    infos = normalize_prim_func(sch)
    if infos is None:
        return False
    kinds = [info.dom_kind() for info in infos]
    rows = min(_leading_spatial(k) for k in kinds)
    if not rows or any("R" in k and k.lstrip("S") != k[rows:] for k in kinds):
        return False
    if any(sch.get(info.block_rv).writes[0].source.dtype == "bool" for info in infos):
        return False
    order = []  # (block, what to vectorize: "rf" lanes, "cols" of an injective block, "")
    for info, kind in zip(infos, kinds):
        if "R" in kind:
            reduction = sch.get_loops(info.block_rv)[rows:]
            loop = sch.fuse(*reduction) if len(reduction) > 1 else reduction[0]
            extent = get_extent(sch, loop)
            lanes = _lanes(extent, _vector_lanes(sch.get(info.block_rv), bits))
            if not lanes or extent <= lanes:
                return False  # not worth it: a row's plain loops ran faster
            _, inner = sch.split(loop, [None, lanes])
            order.append((sch.rfactor(inner, rows), "rf"))
        order.append((info.block_rv, "" if "R" in kind else "cols"))
    last = sch.get_loops(order[-1][0])
    row = sch.fuse(*last[:rows]) if rows > 1 else last[0]
    for block, _ in reversed(order[:-1]):
        sch.compute_at(block, row, preserve_unit_loops=True)
    for block, what in order:
        if what == "rf":
            _vectorize_partials(sch, block)
        elif what == "cols":
            _vectorize_cols(sch, block, _vector_lanes(sch.get(block), bits))
    return True


def _vectorize_partials(sch: s_tir.Schedule, block) -> None:
    """The lanes of an ``rfactor`` block (loops: row, lanes, unit loops, outer
    reduction) moved innermost and vectorized, its init too."""
    loops = sch.get_loops(block)
    lanes, outer = loops[1], loops[-1]
    sch.reorder(outer, lanes)
    sch.vectorize(lanes)
    init = sch.decompose_reduction(block, outer)
    sch.vectorize(sch.get_loops(init)[-1])


def _vectorize_cols(sch: s_tir.Schedule, block, lanes: int) -> None:
    """An injective block's loops inside the row loop fused and vectorized."""
    loops = sch.get_loops(block)[1:]
    if not loops:
        return
    loop = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    extent = get_extent(sch, loop)
    lanes = _lanes(extent, lanes)
    if not lanes:
        return
    if extent != lanes:
        _, loop = sch.split(loop, [None, lanes])
    sch.vectorize(loop)


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
    """The block's loops fused and split by the lanes that divide its innermost loop
    (other than 1s): a vector then never spans two rows, whose broadcast operands it
    would gather lane by lane (softmax over 197 columns: 1.4x slower than plain loops)."""
    loops = sch.get_loops(info.block_rv)
    extents = [e for e in (get_extent(sch, loop) for loop in loops) if e != 1]
    if not extents:
        return False
    lanes = _lanes(extents[-1], lanes)
    loop = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    extent = get_extent(sch, loop)
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
