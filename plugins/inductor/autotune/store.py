"""Tuned winners on disk, so that a second process benchmarks nothing.

One entry per tuned kernel, ``$TORCHKILN_CACHE_DIR/autotune/<key[:2]>/<key>.json``, through
torchkiln's checked cache entries (``read_entry``/``write_entry``). The key hashes what the
winner is valid for: the kernel's source, the device, the argument sizes and the candidates
that were measured (a different candidate set is tuned again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from torchkiln.plugin import Damaged, cache_dir, discard, read_entry, write_entry

#: bump when the meaning of a stored winner changes
FORMAT = 1

#: winners of this process, for a cache that keeps nothing (read-only, untrusted)
_tuned: dict[str, str] = {}


def tuning_key(*parts: object) -> str:
    """The hash of ``parts`` (their ``repr``), which together name one tuning problem."""
    h = hashlib.sha256(f"autotune{FORMAT}".encode())
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / "autotune" / key[:2] / f"{key}.json"


def load_winner(key: str) -> str | None:
    """The name of the choice stored for ``key``, or ``None`` when it was never tuned."""
    if key in _tuned:
        return _tuned[key]
    path = _path(key)
    try:
        data = read_entry(path)
    except Damaged:
        discard(path)
        return None
    return None if data is None else json.loads(data)["winner"]


def store_winner(key: str, winner: str, timings_ms: dict[str, float]) -> None:
    """Keep ``winner`` for ``key`` (with every candidate's time, for whoever reads the file)."""
    _tuned[key] = winner
    payload = {"winner": winner, "timings_ms": timings_ms}
    write_entry(_path(key), json.dumps(payload, indent=1, sort_keys=True).encode())
