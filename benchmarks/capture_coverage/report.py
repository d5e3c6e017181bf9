"""Summary of a coverage run: counts by status, the capture rate, break reasons grouped.

The rate is captured-correct over the programs that count (torch.compile
captures them in one graph, correctly). Break reasons are grouped by their
text with names, numbers and addresses blanked out, so that one missing
feature met by many programs is one line.
"""

from __future__ import annotations

import collections
import re
from typing import Any

from benchmarks.capture_coverage.check import COUNTED, STATUSES

#: Quoted text, numbers and hex addresses: what differs between two breaks of one kind.
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|<[^>]*>|0x[0-9a-fA-F]+|\b\d+\b")
#: The arguments of a repr such as ``Tensor(l_x, (4,), torch.float32)`` (one level of nesting).
_REPR_ARGS = re.compile(r"\b(\w+)\((?:[^()]|\([^()]*\))*\)")


def pattern(reason: str) -> str:
    """The reason's text with what varies from program to program blanked out."""
    first_line = reason.splitlines()[0] if reason else ""
    return _VARYING.sub("…", _REPR_ARGS.sub(r"\1(…)", first_line))


def summarize(results: dict[str, dict[str, Any]], top: int = 15) -> dict[str, Any]:
    counts = collections.Counter(r["status"] for r in results.values())
    counted = sum(counts[s] for s in COUNTED)
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for name, r in results.items():
        if r["status"] == "graph-break":
            groups[pattern(r["reason"])].append(name)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))
    return {
        "counts": {s: counts[s] for s in STATUSES},
        "counted": counted,
        "captured_correct_pct": round(100 * counts["captured-correct"] / counted, 1)
        if counted
        else None,
        "break_reasons": [
            {"pattern": p, "count": len(names), "example": names[0], "programs": names}
            for p, names in ranked[:top]
        ],
        "failures": {
            name: r
            for name, r in results.items()
            if r["status"] in ("wrong-result", "translator-crash", "timeout")
        },
    }


def render(summary: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    lines = ["## Capture coverage", ""]
    for status, n in summary["counts"].items():
        lines.append(f"{status:>24}: {n}")
    pct = summary["captured_correct_pct"]
    lines += [
        "",
        f"captured-correct among the {summary['counted']} programs torch.compile captures: "
        f"{pct if pct is not None else '-'}%",
        "",
        "### Top graph-break reasons (count, pattern, example program: its reason)",
    ]
    for group in summary["break_reasons"]:
        example = group["example"]
        reason = results[example]["reason"].splitlines()[0]
        lines.append(f"{group['count']:>4}  {group['pattern']}\n      e.g. {example}: {reason}")
    if summary["failures"]:
        lines += ["", "### Wrong results, translator crashes, timeouts"]
        for name, r in summary["failures"].items():
            where = r.get("torchkiln_frame") or r.get("phase") or ""
            lines.append(f"{r['status']}: {name}: {r['error']}  [{where}]")
    return "\n".join(lines)
