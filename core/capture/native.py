"""The guard checks built from C++ (``native_guards.cpp``): a guard function in microseconds.

A model's guard function checks hundreds of types, identities and constants and every
parameter's metadata on every call; in Python that is 50-70 ns a check (a tensor's
dtype, device, requires_grad, sizes and strides about 1 us), and most of what a compiled
model costs over eager on the host. The C++ module's ``guard_program`` makes those checks
in one call (``guard_program.py`` says which).

It is built with the system's C++ compiler (``$CXX``, default ``g++``) against the torch
that is imported, once, under a key of its source, the command line, the compiler, torch and
Python: into the folder ``_native/`` beside this file (part of the installation, trusted as
its code is), or where that is read-only, into the cache directory (``disk_cache``: sealed,
checked before it is loaded). Where it is not built yet, :func:`module` starts building it
in a background thread and returns None: guard functions compiled until it is ready make
every check in Python (same answers, slower). ``python -m torchkiln build-native`` builds it
now (the Makefile's install does). ``config.native_guards = False``
(``TORCHKILN_NATIVE_GUARDS=0``) keeps every check in Python.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import torch

from torchkiln import config
from torchkiln.cache_seal import Damaged
from torchkiln.capture.guard_program import OP_DATA_PTR, OP_TENSOR, STEP_ARG, STEP_ITEM
from torchkiln.disk_cache import cache_dir, discard, read_entry, write_entry

log = logging.getLogger("torchkiln")

SOURCE = Path(__file__).with_name("native_guards.cpp")
NAME = "_kiln_guards"

_lock = threading.Lock()
_module: ModuleType | None = None
#: Whether this process started a build (no second try, whether it failed or not).
_tried = False


def module() -> ModuleType | None:
    """The built module, or None: turned off, not built yet (building now), or unbuildable."""
    global _tried
    if not config.native_guards:
        return None
    if _module is not None:
        return _module
    with _lock:
        if _module is not None or _tried:
            return _module
        if _load_stored():
            return _module
        _tried = True
    threading.Thread(target=_build_in_background, name="torchkiln-native", daemon=True).start()
    return None


def tensors_check(
    expected: Sequence[tuple[int, tuple, int | None]],
) -> Callable[[list], bool] | None:
    """A check, in one C++ call, that a list holds at each ``(position, layout, address)``
    of ``expected`` a strided tensor of that layout (``(dtype, device, requires_grad,
    sizes, strides)``) and, where ``address`` is not None, whose data starts there. False
    where an item is missing or no such tensor. Python pays 0.1-0.3 us a tensor attribute
    (a ``Parameter``'s the most), this a few ns: a CUDA graph replay checks every parameter
    it reads in place. None where the C++ module is not built (yet): see :func:`module`."""
    native = module()
    if native is None:
        return None
    nodes: list[tuple] = [(-1, STEP_ARG, 0)]
    checks: list[tuple] = []
    for position, layout, address in expected:
        nodes.append((0, STEP_ITEM, position))
        checks.append((len(nodes) - 1, OP_TENSOR, layout))
        if address is not None:
            checks.append((len(nodes) - 1, OP_DATA_PTR, address))
    return native.guard_program(1, nodes, checks)


def build() -> ModuleType:
    """Load the module, built beside the code now if it is not there yet; raises with the
    compiler's message if it can't be built."""
    global _module
    with _lock:
        if _module is None and not (_installed().exists() and _load_stored()):
            _module = _build_and_store()
        return _module


def location() -> Path:
    """Where the build is kept: beside the code, or in the cache directory."""
    return _installed() if _installed().exists() else _entry()


def _build_in_background() -> None:
    global _module
    try:
        built = _build_and_store()
    except Exception as e:  # no compiler, no headers: Python checks, said once
        log.info("torchkiln: guard checks stay in Python: %s", e)
        return
    with _lock:
        _module = built


def _load_stored() -> bool:
    """Load the stored build into ``_module`` (caller holds ``_lock``); whether it did."""
    global _module
    installed = _installed()
    if installed.exists():
        try:
            _module = _import(installed)
            return True
        except ImportError:  # built for another machine
            installed.unlink(missing_ok=True)
    entry = _entry()
    try:
        data = read_entry(entry)
        if data is None:
            return False
        with tempfile.TemporaryDirectory(prefix="torchkiln-native-") as folder:
            path = Path(folder) / f"{NAME}.so"
            path.write_bytes(data)
            _module = _import(path)
        return True
    except (Damaged, ImportError, OSError):  # damaged, or built for another machine
        discard(entry)
        return False


def _build_and_store() -> ModuleType:
    with tempfile.TemporaryDirectory(prefix="torchkiln-native-") as folder:
        path = Path(folder) / f"{NAME}.so"
        done = subprocess.run(_command(path), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"building {SOURCE.name} failed ({' '.join(_command(path)[:1])}): "
                f"{done.stderr.strip()[-2000:]}"
            )
        built = _import(path)
        installed = _installed()
        try:  # beside the code; another process sees the whole file or none
            installed.parent.mkdir(exist_ok=True)
            staged = installed.with_suffix(f".{os.getpid()}.tmp")
            staged.write_bytes(path.read_bytes())
            os.replace(staged, installed)
        except OSError:  # a read-only installation: the cache directory
            write_entry(_entry(), path.read_bytes())
        return built


def _import(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(NAME, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _command(output: Path) -> list[str]:
    torch_dir = Path(torch.__file__).parent
    lib = torch_dir / "lib"
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        _compiler(),
        "-O2", "-shared", "-fPIC", "-std=c++17", "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{torch_dir / 'include'}",
        f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-I{sysconfig.get_paths()['include']}",
        str(SOURCE), "-o", str(output),
        f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10",
    ]  # fmt: skip


def _installed() -> Path:
    return SOURCE.parent / "_native" / f"{_key()}.so"


def _compiler() -> str:
    return os.environ.get("CXX", "g++")


def _entry() -> Path:
    return cache_dir() / "native" / f"{_key()}.so"


@functools.cache
def _key() -> str:
    try:
        compiler = subprocess.run(
            [_compiler(), "--version"], capture_output=True, text=True
        ).stdout.partition("\n")[0]
    except OSError:
        compiler = "none"
    h = hashlib.sha256()
    for part in (SOURCE.read_text(), " ".join(_command(Path("x"))), compiler, torch.__version__,
                 sys.version, sysconfig.get_config_var("EXT_SUFFIX") or ""):  # fmt: skip
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()
