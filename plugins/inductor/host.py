"""The machine that compiles: how many cores this process may use."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (a container's or ``taskset``'s share)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
