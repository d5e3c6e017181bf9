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

A large source (a training graph's backward) compiles as several translation
units at once, one per usable core, linked into the one library: the kernels
are independent ``extern "C"`` functions after a prelude of declarations and
inline definitions, which each part repeats (:func:`_parts`).

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
import re
import subprocess
import tempfile
import threading
from pathlib import Path

from torchkiln import counters
from torchkiln.exc import BackendCompilerFailed, KilnError
from torchkiln.plugin import Damaged, cache_dir, discard, read_entry, write_entry

from .host import usable_cores

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
#: Kernel source characters worth a compiler process of their own: each part compiles the
#: prelude again (0.2 s on the 2-core VM), about as long as a part of this size takes
PART_CHARS = 5000
#: Where a generated kernel begins (``codegen.cpp.translation_unit`` puts the prelude first)
KERNEL_START = re.compile(r'^extern "C" (?:void|int64_t) kiln_', re.MULTILINE)

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
    """Compile ``source`` into the library ``path`` (in a private temporary folder): in one
    compiler run, or its :func:`_parts` compiled at once and linked."""
    parts = _parts(source)
    if len(parts) == 1:
        cpp = path.with_suffix(".cpp")
        cpp.write_text(source)
        _check([_start(command(cpp, path, opt_level))])
        return
    compile_only = [compiler(), f"-{opt_level}", *(f for f in BASE_FLAGS if f != "-shared"), "-c"]
    objects, runs = [], []
    for i, part in enumerate(parts):
        cpp = path.with_name(f"{path.stem}.{i}.cpp")
        cpp.write_text(part)
        objects.append(cpp.with_suffix(".o"))
        runs.append(_start([*compile_only, str(cpp), "-o", str(objects[-1])]))
    _check(runs)
    _check(
        [_start([compiler(), "-shared", "-fopenmp", *map(str, objects), "-o", str(path), *LIBS])]
    )


def _parts(source: str) -> list[str]:
    """``source`` as translation units to compile at once, at most one per usable core: each
    the prelude (all before the first kernel) and a share of the kernels, dealt largest first
    to the part with the fewest characters. One part (``source``) where the kernels are too
    few or too small to pay for compiling the prelude again."""
    starts = [m.start() for m in KERNEL_START.finditer(source)]
    if not starts:
        return [source]
    count = min(len(starts), usable_cores(), (len(source) - starts[0]) // PART_CHARS)
    if count < 2:
        return [source]
    kernels = [source[a:b] for a, b in zip(starts, [*starts[1:], len(source)])]
    parts: list[list[str]] = [[] for _ in range(count)]
    sizes = [0] * count
    for kernel in sorted(kernels, key=len, reverse=True):
        smallest = sizes.index(min(sizes))
        parts[smallest].append(kernel)
        sizes[smallest] += len(kernel)
    return [source[: starts[0]] + "".join(part) for part in parts]


def _start(cmd: list[str]) -> tuple[list[str], subprocess.Popen]:
    return cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _check(runs: list[tuple[list[str], subprocess.Popen]]) -> None:
    """Wait for every compiler run; if one failed, raise with its command and its errors."""
    failed = []
    for cmd, process in runs:
        _, stderr = process.communicate()
        if process.returncode != 0:
            failed.append(f"C++ compilation failed: {' '.join(cmd)}\n{stderr[-4000:]}")
    if failed:
        raise BackendCompilerFailed("inductor", "<generated C++>", KilnError(failed[0]))
