"""Candidate variants of a generated C++ kernel, around the generator's heuristic.

Two choices measured faster on the zoo's kernels (one thread, each variant timed against
the heuristic on the kernel's real inputs, ``benchmarks/results/cpu-2026-11-29e-cpp-autotune``):

* ``serial``: the kernel's loops without OpenMP. The heuristic runs a kernel's outer loop in
  an OpenMP region once its work reaches ``cpp.parallel_threshold`` elements; the region's
  entry, and the outlined loop gcc compiles for it, cost up to a third of a small kernel's
  time (median 0.94x over the zoo's parallel kernels, a third of them under 0.9x).
* ``simdlen``: fewer accumulator lanes per reduction (column reductions have four times as
  many). The heuristic's 32 lanes leave a 128-element row 4 steps per lane and a long merge;
  16 lanes took a median 0.89x over the zoo's reduction kernels. 8 lanes won and lost about
  as often (a quarter of the kernels each way by over 10%), and cut a transposing column
  reduction's 128 strided stores (nanoGPT's qkv bias gradient) to 32: 0.26x.

Tried and dropped (no gain beyond what timing a second copy of the heuristic's code shows:
median 0.999x, 5% of kernels under 0.9x): ``-mprefer-vector-width=256`` (median 1.06x, 44%
of kernels over 1.1x), 64 lanes (median 1.04x), ``-funroll-loops`` per kernel (median
0.995x, 8% under 0.9x; of the 34 kernels it sped up by over 7%, 16 were not 3% faster in a
second run), OpenMP on kernels under the threshold (median 1.17x on one thread; with two,
on this shared 2-core host, OpenMP threads stall whenever another process holds a core).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CppConfig:
    """How one variant's loops run: ``simdlen`` accumulator lanes per reduction, and
    ``serial`` (no OpenMP region) or the heuristic's choice."""

    simdlen: int
    serial: bool = False

    @property
    def name(self) -> str:
        return f"simdlen{self.simdlen}" + ("-serial" if self.serial else "")


def candidates(simdlen: int) -> list[CppConfig]:
    """The heuristic (``cpp.simdlen`` lanes, OpenMP over the threshold) first, then serial,
    then each with half and a quarter of the lanes (at least 2). A variant whose source comes
    out as an earlier one's (a pointwise kernel has no lanes; a small one is serial already)
    is dropped where it is generated (``cpp_variants``)."""
    lanes = [simdlen] + [s for s in (simdlen // 2, simdlen // 4) if s >= 2]
    return [CppConfig(s, serial) for s in dict.fromkeys(lanes) for serial in (False, True)]
