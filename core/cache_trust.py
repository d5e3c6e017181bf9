"""Whose cache entries torchkiln loads: loading an entry runs code, so only trusted ones.

Two settings, read from the environment on every access:

- private (the default): an entry is trusted when the cache root, every
  folder down to it and the entry itself are owned by the current user and
  not writable by group or others. torchkiln creates folders 0700 and files
  0600. A cache that fails this is not used (one warning naming the folder
  and the fix); compilation goes on without it.
- shared (``TORCHKILN_CACHE_TRUST=shared``): a cache that other users or
  machines write (a team folder, a Redis server). Ownership and modes are
  not required; instead every entry must carry an HMAC-SHA256 made with the
  key in ``TORCHKILN_CACHE_KEY_FILE`` (which must be yours or root's and not
  writable by others).

A key file given in private mode signs entries too, and then every entry
must carry a valid signature.
"""

from __future__ import annotations

import os
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path

TRUST_ENV = "TORCHKILN_CACHE_TRUST"
KEY_ENV = "TORCHKILN_CACHE_KEY_FILE"
MIN_KEY_BYTES = 16


class CacheTrustWarning(RuntimeWarning):
    """An on-disk or remote cache is not used, and why."""


@dataclass(frozen=True)
class Trust:
    """How entries are checked: by owner and mode (private) or by signature only (shared)."""

    shared: bool
    key: bytes | None

    @property
    def folder_mode(self) -> int:
        return 0o775 if self.shared else 0o700

    @property
    def file_mode(self) -> int:
        return 0o644 if self.shared else 0o600


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Warn once per process and message: caches are consulted on every compile."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, CacheTrustWarning, stacklevel=3)


def current() -> Trust | None:
    """The trust settings of this environment; ``None`` (warned once) when they are unusable."""
    mode = os.environ.get(TRUST_ENV) or "private"
    if mode not in ("private", "shared"):
        warn_once(
            f"torchkiln: {TRUST_ENV}={mode!r} is not 'private' or 'shared': the on-disk cache "
            f"is not used. Fix: unset it, or set it to 'shared' together with {KEY_ENV}."
        )
        return None
    key_file = os.environ.get(KEY_ENV)
    if not key_file:
        if mode == "shared":
            warn_once(
                f"torchkiln: {TRUST_ENV}=shared needs {KEY_ENV} (a file holding the team's secret "
                "key, at least 16 bytes) to verify entries: the cache is not used. Fix: set "
                f"{KEY_ENV}, or unset {TRUST_ENV} for a private cache."
            )
            return None
        return Trust(shared=False, key=None)
    key = _read_key(Path(key_file))
    return None if key is None else Trust(shared=mode == "shared", key=key)


def _read_key(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            key = f.read()
    except OSError as e:
        warn_once(f"torchkiln: cannot read {KEY_ENV}={path}: {e}; the cache is not used.")
        return None
    problem = _owner_problem(st, allow_root=True)
    if problem is None and len(key.strip()) < MIN_KEY_BYTES:
        problem = f"holds fewer than {MIN_KEY_BYTES} bytes"
    if problem is not None:
        warn_once(
            f"torchkiln: not using the cache: the key file {path} {problem}. Fix: a file of "
            f"your own, not writable by others (chmod 600 {path}), holding a long random key."
        )
        return None
    return key.strip()


def _owner_problem(st: os.stat_result, allow_root: bool = False) -> str | None:
    """Why a file or folder with this status may hold someone else's code, or ``None``."""
    me = os.geteuid()
    if st.st_uid != me and not (allow_root and st.st_uid == 0):
        return f"is owned by uid {st.st_uid}, not by you (uid {me})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _refuse(path: Path, problem: str) -> None:
    warn_once(
        f"torchkiln: not using the on-disk cache under {path}: it {problem}, so someone else "
        "could plant code that torchkiln would run as you. Fix: `chmod -R go-w` it and "
        "make it yours, remove it, or set TORCHKILN_CACHE_DIR to a folder of your own "
        f"(a cache shared on purpose needs {TRUST_ENV}=shared and {KEY_ENV})."
    )


def folders_trusted(root: Path, folder: Path, trust: Trust) -> bool:
    """Whether ``root`` and the folders from it down to ``folder`` that exist may be trusted
    (warns once otherwise). Missing folders are fine: nothing can be read from them."""
    if trust.shared:
        return True
    current = root
    for part in ("", *folder.relative_to(root).parts):
        current = current / part if part else current
        try:
            st = os.stat(current)
        except OSError:  # missing, or not a folder: opening the entry fails
            return True
        problem = _owner_problem(st)
        if problem is not None:
            _refuse(current, problem)
            return False
    return True


def file_trusted(path: Path, st: os.stat_result, trust: Trust) -> bool:
    """Whether an opened entry (its ``fstat``) may be trusted; warns once otherwise."""
    problem = None if trust.shared else _owner_problem(st)
    if problem is not None:
        _refuse(path, problem)
    return problem is None


def make_folders(root: Path, folder: Path, trust: Trust) -> None:
    """Create ``root`` (its parents as usual) and the folders down to ``folder`` with the
    trust's mode; raises ``OSError``."""
    root.parent.mkdir(parents=True, exist_ok=True)
    current = root
    for part in ("", *folder.relative_to(root).parts):
        current = current / part if part else current
        try:
            current.mkdir(mode=trust.folder_mode)
        except FileExistsError:
            pass
