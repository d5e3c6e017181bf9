"""Compiling generated C++ into a shared library, through an on-disk cache.

The cache lives in ``$TORCHKILN_CACHE_DIR`` (default
``$XDG_CACHE_HOME/torchkiln`` or ``~/.cache/torchkiln``), under
``cpp/<key[:2]>/<key>.so``, where ``key`` hashes the source, the compiler
command line, the compiler version and the CPU (``-march=native`` code is
only valid on the CPU it was built for). A second process compiling the same
graph loads the library and runs no compiler. Entries go through
``read_entry``/``write_entry`` (torchkiln's trust and integrity checks: the
library's size and SHA-256 are recorded when it is stored and verified
before it is loaded), so a truncated, zero-filled or replaced library is
rebuilt, never ``dlopen``'d. Libraries are built, and loaded, from a
private temporary folder (``$TMPDIR``): nobody else can swap the file
between the check and the load, or truncate it while it is mapped. Threads
building different sources run their compilers at the same time (max_autotune
builds its C++ variants so); two asking for the same source build it once.

Flags: ``-O3 -march=native -mprefer-vector-width=512 -fopenmp
-fno-math-errno -fno-trapping-math`` (no ``-ffast-math``: NaN and inf
behave as in eager), linked with ``libmvec`` so loops calling exp/erf/tanh
vectorize.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path

from torchkiln import counters
from torchkiln.exc import BackendCompilerFailed, KilnError
from torchkiln.plugin import Damaged, cache_dir, discard, read_entry, write_entry

BASE_FLAGS = (
    "-shared",
    "-fPIC",
    "-std=c++17",
    "-march=native",
    "-mprefer-vector-width=512",
    "-fopenmp",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-w",
)
LIBS = ("-lmvec", "-lm")

_loaded: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()  # guards _building
_building: dict[str, threading.Lock] = {}  # one lock per source: different ones build at once


def compiler() -> str:
    return os.environ.get("CXX", "g++")


@functools.cache
def toolchain_id() -> str:
    """The compiler's version and the CPU: generated code is only valid for both."""
    try:
        version = subprocess.run(
            [compiler(), "--version"], capture_output=True, text=True, check=True
        ).stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError) as e:
        raise KilnError(
            f"the inductor backend needs a C++ compiler ({compiler()!r}, set $CXX to change it): {e}"
        ) from e
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                cpu += line
            if line.startswith("flags"):
                break
    except OSError:
        cpu = platform.processor()
    return f"{version}|{platform.machine()}|{cpu}"


def command(source: Path, output: Path, opt_level: str) -> list[str]:
    return [compiler(), f"-{opt_level}", *BASE_FLAGS, str(source), "-o", str(output), *LIBS]


def cache_key(source: str, opt_level: str) -> str:
    h = hashlib.sha256()
    for part in (source, " ".join(command(Path("x"), Path("y"), opt_level)), toolchain_id()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load_library(source: str, opt_level: str = "O3") -> ctypes.CDLL:
    """The library built from ``source``: from this process, from disk, or compiled now."""
    key = cache_key(source, opt_level)
    with _lock:
        building = _building.setdefault(key, threading.Lock())
    with building:
        lib = _loaded.get(key)
        if lib is not None:
            return lib
        entry = cache_dir() / "cpp" / key[:2] / f"{key}.so"
        lib = _load_entry(entry)
        if lib is None:
            with tempfile.TemporaryDirectory(prefix="torchkiln-cpp-") as folder:
                path = Path(folder) / f"{key}.so"
                _build(source, path, opt_level)
                counters["inductor"]["cpp_builds"] += 1
                try:
                    lib = ctypes.CDLL(str(path))
                except OSError as e:
                    raise KilnError(
                        f"the freshly built library does not load ({e}); if $TMPDIR "
                        f"({folder}) is mounted noexec, point TMPDIR at a folder that is not"
                    ) from e
                write_entry(entry, path.read_bytes())
        _loaded[key] = lib
        return lib


def _load_entry(entry: Path) -> ctypes.CDLL | None:
    """The stored library, verified and loaded from a private copy; ``None`` (a damaged entry
    deleted, to be rebuilt) when there is none that loads."""
    try:
        data = read_entry(entry)
        if data is None:
            return None
        with tempfile.TemporaryDirectory(prefix="torchkiln-cpp-") as folder:
            copy = Path(folder) / entry.name
            copy.write_bytes(data)
            return ctypes.CDLL(str(copy))
    except (Damaged, OSError):  # truncated, replaced, built for another machine: rebuild it
        discard(entry)
        return None


def _build(source: str, path: Path, opt_level: str) -> None:
    """Compile ``source`` into the library ``path`` (in a private temporary folder)."""
    cpp = path.with_suffix(".cpp")
    cpp.write_text(source)
    cmd = command(cpp, path, opt_level)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BackendCompilerFailed(
            "inductor",
            "<generated C++>",
            KilnError(f"C++ compilation failed: {' '.join(cmd)}\n{result.stderr[-4000:]}"),
        )
