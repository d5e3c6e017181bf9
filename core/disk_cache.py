"""Where compiled artifacts live on disk, and how they get there safely.

Everything torchkiln and its plugins keep between processes goes under
:func:`cache_dir`: ``$TORCHKILN_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/torchkiln`` (``~/.cache/torchkiln``). Entries are written
to a private temporary file and renamed into place, so concurrent processes
never read a half-written entry; a reader treats an entry it cannot read as
missing.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import sys
import tempfile
from pathlib import Path

import torch


def cache_dir() -> Path:
    """The root folder of torchkiln's on-disk caches (read from the environment each call)."""
    root = os.environ.get("TORCHKILN_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "torchkiln"


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def discard(path: Path) -> None:
    """Remove a damaged entry so that it gets rebuilt; never fails."""
    try:
        path.unlink()
    except OSError:
        pass


@functools.cache
def source_fingerprint(package_dir: str) -> str:
    """A hash of every source file of a package: a cache entry is only valid for the code
    that produced it, so editing the compiler (or upgrading it) invalidates its entries."""
    h = hashlib.sha256()
    root = Path(package_dir)
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".h", ".cpp") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class Uncacheable(Exception):
    """This value can't be named stably across processes (the message says why)."""


def stable_name(fn: object) -> str:
    """A name that finds ``fn`` again in another process: ``module:qualname`` or an op's name."""
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"op:{fn}"
    owner = getattr(fn, "__objclass__", None)  # methods of C types: TensorBase.add
    name = getattr(fn, "__name__", None)
    if owner is not None and name and getattr(owner, name, None) is fn:
        return f"{stable_name(owner)}.{name}"
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    for path in (getattr(fn, "__qualname__", None), name):
        if module is None or not path or "<" in path:
            continue
        found: object = module
        for part in path.split("."):
            found = getattr(found, part, None)
        if found is fn:
            return f"{module.__name__}:{path}"
    raise Uncacheable(f"{fn!r} has no importable name")


class _Pickler(pickle.Pickler):
    """Stores ``torch.ops`` overloads by name: they are not picklable themselves."""

    def persistent_id(self, obj: object) -> tuple[str, str, str] | None:
        if isinstance(obj, torch._ops.OpOverload):
            return ("op", obj.namespace, f"{obj._opname}.{obj._overloadname}")
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: tuple[str, str, str]) -> object:
        _, namespace, path = pid
        name, overload = path.split(".")
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def dumps(obj: object) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def loads(data: bytes) -> object:
    return _Unpickler(io.BytesIO(data)).load()
