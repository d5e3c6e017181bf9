"""Compiling generated C++ into a shared library, through an on-disk cache.

The cache lives in ``$TORCHKILN_CACHE_DIR`` (default
``$XDG_CACHE_HOME/torchkiln`` or ``~/.cache/torchkiln``), under
``cpp/<key[:2]>/<key>.so``, where ``key`` hashes the source, the compiler
command line, the compiler version and the CPU (``-march=native`` code is
only valid on the CPU it was built for). A second process compiling the same
graph loads the library and runs no compiler. Builds write to a private
temporary file and ``os.replace`` it into place, so concurrent processes
never see a half-written library; an entry that fails to load is rebuilt.

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

from torchkiln.exc import BackendCompilerFailed, KilnError
from torchkiln.plugin import cache_dir

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
_lock = threading.Lock()


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
        lib = _loaded.get(key)
        if lib is not None:
            return lib
        path = cache_dir() / "cpp" / key[:2] / f"{key}.so"
        lib = _try_load(path)
        if lib is None:
            _build(source, path, opt_level)
            lib = _try_load(path)
            if lib is None:
                raise KilnError(f"the freshly built library {path} does not load")
        _loaded[key] = lib
        return lib


def _try_load(path: Path) -> ctypes.CDLL | None:
    if not path.exists():
        return None
    try:
        return ctypes.CDLL(str(path))
    except OSError:
        # a damaged entry (truncated copy, disk error): rebuild it
        try:
            path.unlink()
        except OSError:
            pass
        return None


def _build(source: str, path: Path, opt_level: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_src = tempfile.mkstemp(suffix=".cpp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_lib = f"{tmp_src[:-4]}.so"
    cmd = command(Path(tmp_src), Path(tmp_lib), opt_level)
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise BackendCompilerFailed(
                "inductor",
                "<generated C++>",
                KilnError(f"C++ compilation failed: {' '.join(cmd)}\n{result.stderr[-4000:]}"),
            )
        os.replace(tmp_lib, path)
        os.replace(tmp_src, path.with_suffix(".cpp"))
    finally:
        for leftover in (tmp_src, tmp_lib):
            try:
                os.unlink(leftover)
            except OSError:
                pass
