"""The kit's conformance report: what passed, what the core partitioned away, what failed.

:class:`Recorder` listens to the ``torchkiln`` logger while a check runs: the partition
plans of split graphs (the ``partitions`` artifact, ``torchkiln.chain.PartitionPlan``)
and the warnings (a partition whose compile raised and ran with the next backend).
"""

from __future__ import annotations

import logging
import operator
from collections import defaultdict
from dataclasses import dataclass, field

from torchkiln import logs
from torchkiln.chain import PartitionPlan
from torchkiln.testing.kit import SLOW_MARKER, Check


@dataclass
class Notes:
    """What the core said while one check ran."""

    #: "op: why" for each op of the tested backend's graphs that another backend ran
    partitioned_away: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


class Recorder(logging.Handler):
    """``with Recorder(backend) as notes:`` collects :class:`Notes` from the ``torchkiln`` logger."""

    def __init__(self, backend: str) -> None:
        super().__init__(logging.INFO)
        self.backend = backend
        self.notes = Notes()
        self._logger = logging.getLogger("torchkiln")

    def __enter__(self) -> Notes:
        self._artifacts = ",".join(a for a in logs.ARTIFACTS if logs.enabled(a))
        self._level = self._logger.level
        self._logger.addHandler(self)  # first: set_logs then adds no stderr handler of its own
        logs.set_logs(f"{self._artifacts},partitions")
        return self.notes

    def __exit__(self, *exc: object) -> None:
        logs.set_logs(self._artifacts)
        self._logger.setLevel(self._level)
        self._logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        plan = record.args[0] if isinstance(record.args, tuple) and record.args else None
        if isinstance(plan, PartitionPlan):
            self._add_plan(plan)
        elif record.levelno >= logging.WARNING:
            text = " ".join(record.getMessage().split())
            text = text if len(text) <= 200 else text[:199] + "…"
            if text not in self.notes.warnings:
                self.notes.warnings.append(text)

    def _add_plan(self, plan: PartitionPlan) -> None:
        for partition in plan.partitions:
            if plan.backends[partition.label] == self.backend:
                continue
            for node in partition.nodes:
                if node.target is operator.getitem:
                    continue
                op = getattr(node.target, "__name__", str(node.target))
                why = "; ".join(plan.reasons.get(node, ())) or "its compile failed: see warnings"
                self.notes.partitioned_away.add(f"{op} ({why})")


@dataclass
class Result:
    check: Check
    outcome: str  # passed, failed, xfailed, xpassed, skipped
    message: str = ""
    notes: Notes = field(default_factory=Notes)


@dataclass
class Report:
    """Results of every check that ran, per backend, and the slow checks left out."""

    results: dict[str, list[Result]] = field(default_factory=lambda: defaultdict(list))
    not_run: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, result: Result) -> None:
        self.results[result.check.backend].append(result)

    def lines(self) -> list[str]:
        out = []
        for backend in sorted(self.results):
            results = self.results[backend]
            count = defaultdict(int)
            for r in results:
                count[r.outcome] += 1
            summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(count.items()))
            out.append(f"backend {backend!r}: {summary or 'no check ran'}")
            if self.not_run[backend]:
                out.append(
                    f"  {self.not_run[backend]} slow checks not run "
                    f"(-m {SLOW_MARKER}, or --kiln-all for every check)"
                )
            away: dict[str, list[str]] = defaultdict(list)
            for r in results:
                for op in sorted(r.notes.partitioned_away):
                    away[op].append(r.check.id)
            if away:
                out.append("  partitioned away (run by the next backend of the chain):")
                out += [f"    {op}: in {_ids(ids)}" for op, ids in sorted(away.items())]
            warned = [(r, w) for r in results for w in r.notes.warnings]
            if warned:
                out.append("  warnings:")
                out += [f"    {r.check.id}: {w}" for r, w in warned]
            for outcome, title in (
                ("failed", "failed"),
                ("xpassed", "passed, though marked as a known failure"),
                ("xfailed", "known failures (xfail)"),
                ("skipped", "skipped"),
            ):
                listed = [r for r in results if r.outcome == outcome]
                if listed:
                    out.append(f"  {title}:")
                    out += [f"    {r.check.id}: {r.message}" for r in listed]
        return out


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
