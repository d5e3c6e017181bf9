"""Candidate launch configs of a generated Triton kernel, around the generator's heuristic.

What may vary without changing the kernel's source: ``XBLOCK`` (elements of the outer loops
per program; the grid follows), the ``RBLOCK`` of each segment that loops over its inner
elements (a persistent segment's block must hold a whole row), ``num_warps``, and for
looping kernels ``num_stages`` (software pipelining of the loop; Triton's default
otherwise). Each block size goes from a quarter to four times the heuristic's, warps from
half to twice the rule of thumb for the tile (``num_warps_for``); candidates are ordered by
how far they stray (the sum of log2 ratios), the heuristic first, so that
``autotune.max_trials`` keeps the nearest. The default mode's light tuning tries only
:func:`light_candidates`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..codegen.triton_module import KernelLaunch

#: factors applied to the heuristic's block sizes
BLOCK_FACTORS = (1 / 4, 1 / 2, 1, 2, 4)
#: factors applied to the tile's rule-of-thumb warps
WARP_FACTORS = (1 / 2, 1, 2)
#: pipelining depths tried for kernels with a loop (``None``: Triton's default)
STAGES = (None, 1, 2, 4)
#: most elements of one [XBLOCK, RBLOCK] tile (registers, not correctness, set this)
MAX_TILE = 16384
MAX_WARPS = 16


@dataclass(frozen=True)
class TritonConfig:
    """Block sizes (``XBLOCK``, ``RBLOCK<k>``), warps and stages of one launch."""

    meta: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int | None

    @property
    def name(self) -> str:
        parts = [f"{k}={v}" for k, v in self.meta] + [f"warps={self.num_warps}"]
        if self.num_stages is not None:
            parts.append(f"stages={self.num_stages}")
        return ",".join(parts)

    def grid(self, xnumel: int) -> tuple[int]:
        return (-(-xnumel // dict(self.meta)["XBLOCK"]),)

    def launch(self, xnumel: int) -> tuple:
        """``(grid, meta, num_warps, num_stages)``, as ``launcher_for`` and ``compile_job``
        take them after the kernel."""
        return self.grid(xnumel), dict(self.meta), self.num_warps, self.num_stages


def heuristic(launch: KernelLaunch) -> TritonConfig:
    """The generator's own choice."""
    return TritonConfig(launch.meta, launch.num_warps, None)


def candidates(launch: KernelLaunch) -> list[TritonConfig]:
    """Every config around the heuristic, nearest first (the heuristic itself first)."""
    # the generator's helpers, imported here: loading a light-tuned graph from the plan cache
    # (``light_candidates``) imports no generator
    from ..codegen.triton import _pow2, num_warps_for

    meta = dict(launch.meta)
    rnumels = dict(launch.rnumels)
    looped = [k for k, n in rnumels.items() if n > meta[k]]
    axes = {"XBLOCK": _blocks(meta["XBLOCK"], _pow2(launch.xnumel))}
    axes |= {k: _blocks(meta[k], _pow2(rnumels[k])) for k in looped}
    stages = STAGES if looped else (None,)
    scored = []
    for sizes in itertools.product(*axes.values()):
        chosen = {**meta, **dict(zip(axes, sizes, strict=True))}
        tile = chosen["XBLOCK"] * max((chosen[k] for k in rnumels), default=1)
        if tile > MAX_TILE and sizes != tuple(meta[k] for k in axes):
            continue
        base = num_warps_for(tile)
        warps = sorted({min(MAX_WARPS, max(1, round(base * f))) for f in WARP_FACTORS})
        for num_warps, num_stages in itertools.product(warps, stages):
            config = TritonConfig(tuple(chosen.items()), num_warps, num_stages)
            distance = sum(abs(math.log2(chosen[k] / meta[k])) for k in axes)
            distance += abs(math.log2(num_warps / base)) + (num_stages is not None)
            scored.append((distance, config.name, config))
    scored.sort(key=lambda item: item[:2])
    first = heuristic(launch)
    return [first, *(c for _, _, c in scored if c != first)]


def light_candidates(launch: KernelLaunch) -> list[TritonConfig]:
    """The heuristic, then the same with ``num_warps`` doubled, with half the warps where a
    program holds one whole row, and with each looping ``RBLOCK`` halved alone. In a log of
    light tuning on the H200 (bf16, five training and two inference models, the heuristic and
    four neighbours of each reduction timed), doubling the warps and halving a loop's block
    were 94% of what tuning saved in the kernels it tunes (``LIGHT_TUNING.min_elements``); in
    those of them that hold whole rows (8, rows of 1024) half the warps took a median 0.954x
    the heuristic's time and twice 1.03x."""
    meta = dict(launch.meta)
    rnumels = dict(launch.rnumels)
    out = [heuristic(launch)]
    if launch.num_warps * 2 <= MAX_WARPS:
        out.append(TritonConfig(launch.meta, launch.num_warps * 2, None))
    whole_rows = meta["XBLOCK"] == 1 and all(meta[k] >= n for k, n in rnumels.items())
    if whole_rows and launch.num_warps > 1:
        out.append(TritonConfig(launch.meta, launch.num_warps // 2, None))
    for k, n in rnumels.items():
        if n > meta[k] > 1:
            halved = {**meta, k: meta[k] // 2}
            out.append(TritonConfig(tuple(halved.items()), launch.num_warps, None))
    return out


def _blocks(block: int, largest: int) -> list[int]:
    """Powers of two around ``block``, none above ``largest`` (beyond it: masked work)."""
    return sorted({max(1, min(largest, int(block * f))) for f in BLOCK_FACTORS} | {block})
