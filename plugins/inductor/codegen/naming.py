"""Names in a kernel's text that don't depend on the graph's buffer names.

Generators name a kernel's params and local arrays after the buffers they hold (``in_buf59``,
``local_buf7``); the same fused ops on buffers of the same sizes in another layer would then
be other text, compiled once more. :func:`positional_params` and :func:`renamed` give them
names by position instead, so that identical kernels are identical text.
"""

from __future__ import annotations

import re


def positional_params(params: dict[str, tuple[str, bool]], body: str) -> list[str]:
    """``params`` (buffer -> (param name, written)) in argument order: those read, then those
    written, each in the order ``body`` first uses them (a param it never uses last)."""

    def first_use(buffer: str) -> tuple[bool, int]:
        pname, written = params[buffer]
        match = re.search(rf"\b{re.escape(pname)}\b", body)
        return written, match.start() if match else len(body)

    return sorted(params, key=first_use)


def param_names(params: dict[str, tuple[str, bool]], ordered: list[str]) -> dict[str, str]:
    """Param name -> ``in_ptr{i}`` / ``out_ptr{i}``, numbered in ``ordered``'s order."""
    counts = {False: 0, True: 0}
    names = {}
    for buffer in ordered:
        pname, written = params[buffer]
        names[pname] = f"{'out' if written else 'in'}_ptr{counts[written]}"
        counts[written] += 1
    return names


def renamed(lines: list[str], names: dict[str, str]) -> list[str]:
    """``lines`` with each whole-word occurrence of a key of ``names`` replaced by its value."""
    if not names:
        return lines
    pattern = re.compile(rf"\b({'|'.join(map(re.escape, names))})\b")
    return [pattern.sub(lambda m: names[m[1]], line) for line in lines]
