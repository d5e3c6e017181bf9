"""Where compiled artifacts live on disk, and how they get there safely.

Everything torchkiln and its plugins keep between processes goes under
:func:`cache_dir`: ``$TORCHKILN_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/torchkiln`` (``~/.cache/torchkiln``), and goes through
:func:`write_entry` and :func:`read_entry`, the one place where the trust
model (:mod:`torchkiln.cache_trust`) and the entry checks
(:mod:`torchkiln.cache_seal`) are enforced. Entries are written to a private
temporary file and renamed into place, so concurrent processes never read a
half-written entry; with ``TORCHKILN_CACHE_REDIS`` they also go to a shared
server (:mod:`torchkiln.cache_remote`), read when the local one misses.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import io
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from torchkiln import cache_remote, cache_trust, fx_pickle
from torchkiln.cache_seal import Unsigned, seal, unseal
from torchkiln.cache_trust import Trust


def cache_dir() -> Path:
    """The root folder of torchkiln's on-disk caches (read from the environment each call)."""
    root = os.environ.get("TORCHKILN_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "torchkiln"


def private_cache_dir() -> Path | None:
    """The cache root (created) when it is private and passes the trust checks, else ``None``:
    for caches that load their own files (Triton's), which torchkiln can't check entry by entry."""
    trust = cache_trust.current()
    if trust is None or trust.shared:
        return None
    root = cache_dir()
    try:
        cache_trust.make_folders(root, root, trust)
    except OSError:
        return None
    return root if cache_trust.folders_trusted(root, root, trust) else None


@functools.cache
def scratch_dir() -> Path:
    """A folder of this process's own, removed at exit, for files that must exist to be
    loaded (kernel sources): there nobody else can swap them before they are."""
    folder = tempfile.mkdtemp(prefix="torchkiln-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(folder)


def read_entry(path: Path) -> bytes | None:
    """The payload of the entry at ``path`` (under :func:`cache_dir`), checked before anyone
    unpickles or loads it: from disk, else from the shared server. ``None`` when it is missing,
    not trusted or not signed with the key (warned once); raises ``Damaged`` when it is not
    whole (the caller discards it, so it gets rebuilt)."""
    trust = cache_trust.current()
    if trust is None:
        return None
    root = cache_dir()
    name = path.relative_to(root).as_posix()
    data = _read_local(root, path, trust)
    if data is None:
        data = cache_remote.get(name, trust)
        if data is None:
            return None
        payload = _unseal(
            f"the remote cache {os.environ[cache_remote.REDIS_ENV]}", name, data, trust
        )
        if payload is not None:
            _write_local(root, path, data, trust)
        return payload
    return _unseal(f"the cache under {root}", name, data, trust)


def write_entry(path: Path, payload: bytes) -> bool:
    """Keep ``payload`` as the entry at ``path`` (under :func:`cache_dir`), sealed, on disk and
    on the shared server if there is one; whether it was kept anywhere. Never raises on a
    full or read-only disk: that costs the next process time, nothing else (warned once)."""
    trust = cache_trust.current()
    if trust is None:
        return False
    root = cache_dir()
    name = path.relative_to(root).as_posix()
    data = seal(name, payload, trust.key)
    stored = _write_local(root, path, data, trust)
    return cache_remote.put(name, data, trust) or stored


def _read_local(root: Path, path: Path, trust: Trust) -> bytes | None:
    if not cache_trust.folders_trusted(root, path.parent, trust):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # missing (or a symbolic link, which torchkiln never writes)
        return None
    with os.fdopen(fd, "rb") as f:
        if not cache_trust.file_trusted(path, os.fstat(f.fileno()), trust):
            return None
        return f.read()


def _unseal(where: str, name: str, data: bytes, trust: Trust) -> bytes | None:
    try:
        return unseal(name, data, trust.key)
    except Unsigned:
        cache_trust.warn_once(
            f"torchkiln: entries of {where} are not signed with the key in "
            f"{cache_trust.KEY_ENV} (another key, or none): they are not loaded, and get rebuilt."
        )
        return None


def _write_local(root: Path, path: Path, data: bytes, trust: Trust) -> bool:
    try:
        if not cache_trust.folders_trusted(root, path.parent, trust):
            return False  # a refused cache gets nothing from us, not even folders
        cache_trust.make_folders(root, path.parent, trust)
        if not cache_trust.folders_trusted(root, path.parent, trust):  # made by another meanwhile
            return False
        _write_atomic(path, data, trust.file_mode)
    except OSError as e:
        cache_trust.warn_once(
            f"torchkiln: cannot write the on-disk cache under {root} ({e.strerror}): compiled "
            "work is not kept for the next process. Fix: make it writable, or set "
            "TORCHKILN_CACHE_DIR to a folder you can write."
        )
        return False
    return True


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
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


#: The type of pytree's leaf specs, stored by name (``_Pickler``); ``None`` where torch
#: has no ``treespec_leaf`` to make one (older releases, which unpickle them without warning).
_LEAF_SPEC_TYPE = type(pytree.treespec_leaf()) if hasattr(pytree, "treespec_leaf") else None


class _Pickler(pickle.Pickler):
    """Stores ``torch.ops`` overloads and overload packets (``torch.ops.aten.add``, what a
    call of ``torch.ops.<namespace>.<op>(...)`` captures) by name: they are not picklable
    themselves. Stores pytree leaf specs by name too: unpickled, a ``LeafSpec`` is made
    through its deprecated constructor, a FutureWarning on every cache load (torch 2.13).
    GraphModules pickle as their nodes (:mod:`torchkiln.fx_pickle`: torch's own pickling
    traces them again on load, which breaks other threads' module calls)."""

    def reducer_override(self, obj: object) -> object:
        if isinstance(obj, torch.fx.GraphModule):
            return fx_pickle.reduce(obj)
        return NotImplemented

    def persistent_id(self, obj: object) -> tuple[str, str, str] | None:
        if type(obj) is _LEAF_SPEC_TYPE:
            return ("leaf_spec", "", "")
        if isinstance(obj, torch._ops.OpOverload):
            return ("op", obj.namespace, f"{obj._opname}.{obj._overloadname}")
        if isinstance(obj, torch._ops.OpOverloadPacket):
            namespace, _, name = obj._qualified_op_name.partition("::")
            return ("op", namespace, name)
        return None


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: tuple[str, str, str]) -> object:
        kind, namespace, path = pid
        if kind == "leaf_spec":
            return pytree.treespec_leaf()
        name, _, overload = path.partition(".")
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, overload) if overload else packet


def dumps(obj: object) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def loads(data: bytes) -> object:
    return _Unpickler(io.BytesIO(data)).load()
