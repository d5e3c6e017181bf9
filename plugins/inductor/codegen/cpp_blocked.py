"""Blocked summation for the C++ generator's float ``sum`` and ``welford`` accumulators.

A lane that adds n values one after the other into one float loses accuracy
like n * eps: a row sum of 2^20 floats came out ~60x less accurate than
eager's, and deep convnets amplified BatchNorm statistics computed that way
into wrong gradients. Here a lane's accumulator takes ``BLOCK`` steps (its hot
loop unchanged), then moves into the lane's ``double`` total and restarts
(Welford states by Chan's combination): each float partial sum holds at most
``BLOCK`` terms and the totals keep everything float would, so the error stays
at eager's (ATen sums in a cascade of float blocks and accumulates var in
double). Lanes known to take at most ``BLOCK`` steps need no totals and keep their code
as it was; symbolic step counts (:mod:`..sizes`) get totals unless proved short.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sizes import Size, divides, hint, known_less, size_text

# steps per block: 16 or 32 give short rows (a 768-feature layer norm) flushes they need not
# pay for; 128 left a float row sum of 2^20 at ~5x eager's error, 64 at eager's
BLOCK = 64


@dataclass(frozen=True)
class Blocked:
    """The double totals of one accumulator and the C++ lines that use them.

    ``names``: the accumulator's lane arrays (sum: ``[acc]``; welford: ``[mean, m2, ...]``);
    ``count``: for welford, the scalar lvalue counting the elements each lane of the block
    holds (the kernel's shared block count, or lane 0's weight when there is one lane);
    ``live``: how many lanes hold values (a C++ expression; all of them by default).
    """

    kind: str  # "sum" or "welford"
    names: list[str]
    lanes: int
    count: str = ""
    live: str = ""

    def declare(self) -> list[str]:
        b, lanes = self.names[0], self.lanes
        if self.kind == "sum":
            return [f"double {b}_total[{lanes}] = {{}};"]
        return [f"double {b}_totmean[{lanes}] = {{}}, {b}_totm2[{lanes}] = {{}}, {b}_totw = 0;"]

    def _call(self, what: str) -> str:
        b, live = self.names[0], self.live or str(self.lanes)
        if self.kind == "sum":
            return f"kiln_block_{what}({b}, {b}_total, {live});"
        mean, m2 = self.names[:2]
        totals = f"{b}_totmean, {b}_totm2, {b}_totw"
        return f"kiln_block_welford_{what}({mean}, {m2}, {self.count}, {totals}, {live});"

    def flush(self) -> str:
        """Move the block into the totals and restart it."""
        return self._call("flush")

    def finish(self) -> str:
        """Put the totals plus the last block back into the accumulator (and its count)."""
        return self._call("finish")


@dataclass(frozen=True)
class BlockPlan:
    """Where a reduction's loops move their blocks into the totals.

    The *stepping loop* is the loop whose every iteration is one step of each lane. A long
    one (``per_pass`` > ``BLOCK``) runs in blocks of ``BLOCK`` iterations and flushes after
    each, leaving its body as it was; a short one, inside longer loops, adds its
    ``per_pass`` steps to a counter after each pass and flushes when a block is full.
    """

    blocked: list[Blocked]
    per_pass: Size

    @property
    def counter(self) -> str:
        """The step counter (when the stepping loop is short), named after an accumulator."""
        return f"{self.blocked[0].names[0]}_steps"

    @property
    def split(self) -> bool:
        """Whether the stepping loop runs in blocks (a symbolic one: as its hint says)."""
        return hint(self.per_pass) > BLOCK

    def declare(self) -> list[str]:
        return [] if self.split else [f"int64_t {self.counter} = 0;"]

    def flushes(self) -> str:
        return " ".join(b.flush() for b in self.blocked)


def plan_blocks(blocked: list[Blocked], per_pass: Size, passes: Size) -> BlockPlan | None:
    """The plan for lanes of ``passes`` * ``per_pass`` steps (None: short enough for one block)."""
    if not blocked or known_less(per_pass * passes, BLOCK + 1):
        return None
    return BlockPlan(blocked, per_pass)


def stepping_loop(
    var: str, end: Size, stride: int, body: list[str], plan: BlockPlan | None, pragma: str = ""
) -> list[str]:
    """``for (var = 0; var < end; var += stride) { body }``, one step per iteration, with the
    flushes ``plan`` asks for; ``pragma`` goes right before the loop that runs ``body``."""
    pre = [pragma] if pragma else []
    inner = ["    " + line for line in body]
    if plan is not None and plan.split:
        span = stride * BLOCK
        end_text = size_text(end)
        # whole blocks keep a static trip count; the last block is left to the finish
        stop = (
            f"{var}_b + {span}"
            if divides(span, end)
            else f"std::min<int64_t>({var}_b + {span}, {end_text})"
        )
        return [
            f"for (int64_t {var}_b = 0; {var}_b < {end_text}; {var}_b += {span}) {{",
            *("    " + p for p in pre),
            f"    for (int64_t {var} = {var}_b; {var} < {stop}; {var} += {stride}) {{",
            *("    " + line for line in inner),
            "    }",
            f"    if ({var}_b + {span} < {end_text}) {{ {plan.flushes()} }}",
            "}",
        ]
    loop = f"for (int64_t {var} = 0; {var} < {size_text(end)}; {var} += {stride}) {{"
    lines = [*pre, loop, *inner, "}"]
    if plan is not None:
        c, steps = plan.counter, size_text(plan.per_pass)
        lines.append(f"if (({c} += {steps}) >= {BLOCK}) {{ {c} = 0; {plan.flushes()} }}")
    return lines
