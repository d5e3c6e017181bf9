"""Compiled Triton kernels found by torchkiln's own key, loaded without Triton's JIT.

``JITFunction.warmup`` finds a compiled kernel in Triton's disk cache by a key it computes
in each process: a hash of Triton's own sources and libraries (0.27 s, once a process, on
the H200 machine), of the kernel and the functions it calls, of every argument's
specialization and of the tools and environment. A warm start paid that for every kernel
of every graph; and a process whose environment differs from the one a compile worker
had computes another key and compiles the kernel again (torch.compile sets
``TRITON_PTXAS_PATH``: kiln's first training step after it took 10.3 s against 4.4).

A kernel torchkiln generates is named exactly by :class:`BinaryKey`: its module's source
digest (the module's file name), its name, its arguments' dtypes and pointer alignment
(all Triton specializes on), its block sizes and launch options, the GPU architecture and
Triton's version. Whoever compiles one (a worker, this process) records the key with
Triton's hash of the kernel and what its launcher reads of the source
(:func:`record_of`); a later load builds Triton's ``CompiledKernel`` straight from
Triton's cache files (:func:`load`). Entries live in torchkiln's cache (sealed, like its
others); one whose files Triton's cache no longer has is skipped.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from torchkiln import counters
from torchkiln.cache_seal import Damaged
from torchkiln.disk_cache import cache_dir, discard, read_entry, write_entry

#: modules ``TritonModule.load`` writes: their name is their source's digest
_DIGEST_NAMED = re.compile(r"kiln_[0-9a-f]{24}\.py")
#: the files of a compiled kernel's group in Triton's cache that a load reads: its metadata
#: and its binary (CUDA's cubin, ROCm's hsaco)
_LOADED_SUFFIXES = (".json", ".cubin", ".hsaco")
#: environment variables that name where Triton keeps files or finds its tools, not how it
#: compiles: a binary built under other values is the same kernel
_NOT_IN_KEY = ("TRITON_CACHE_DIR", "TRITON_PTXAS_PATH", "TRITON_HOME")


@dataclass(frozen=True)
class BinaryKey:
    """What one compile of a generated kernel depends on."""

    module: str  # the module's file name: ``kiln_<source digest>.py``
    name: str
    dtypes: tuple[str, ...]  # of the pointer arguments: ``bfloat16``
    aligned: tuple[bool, ...]  # each pointer 16-byte aligned
    meta: tuple[tuple[str, int], ...]  # constexprs (block sizes, size stand-ins), sorted
    num_warps: int
    num_stages: int | None
    arch: int  # the GPU's compute capability, 90 for sm_90

    def path(self) -> Path:
        """Where its record is kept: under a hash of it and of Triton's toolchain."""
        text = json.dumps([*self.__dict__.values(), *_toolchain()])
        return cache_dir() / "triton-binaries" / f"{hashlib.sha256(text.encode()).hexdigest()}"


def key_of(path: str, name: str, dtypes, aligned, meta: dict, num_warps: int,
           num_stages: int | None, arch: int | None = None) -> BinaryKey | None:  # fmt: skip
    """The key of kernel ``name`` of the module at ``path``, compiled for ``arch`` (default:
    what Triton compiles for now); None for a module that is not named by its source (then
    only Triton's own key says what it is)."""
    module = os.path.basename(path)
    if not _DIGEST_NAMED.fullmatch(module):
        return None
    names = tuple(str(d).removeprefix("torch.") for d in dtypes)
    return BinaryKey(
        module, name, names, tuple(aligned), tuple(sorted(meta.items())), num_warps, num_stages,
        current_arch() if arch is None else arch,
    )  # fmt: skip


def key_of_job(job: Any, arch: int) -> BinaryKey | None:
    """The key of a compile worker's job (``triton_workers.CompileJob``): aligned pointers."""
    return key_of(job.path, job.name, job.dtypes, (True,) * len(job.dtypes), dict(job.meta),
                  job.num_warps, job.num_stages, arch)  # fmt: skip


def current_arch() -> int:
    """The architecture Triton compiles for now: 90 for sm_90 (:func:`current_target`)."""
    return current_target()[1]


def current_target() -> tuple[str, int, int]:
    """The current GPU's Triton target, ``(backend, arch, warp size)``: from Triton's
    driver where it is set up (or set: a compile-only one, where no GPU is) or the GPU is
    not CUDA's, else from torch, as Triton's CUDA driver computes it (which would import
    Triton, and build its C utilities where its cache has none)."""
    drivers = sys.modules.get("triton.runtime.driver")
    set_up = drivers is not None and getattr(drivers.driver, "_active", None) is not None
    if not set_up and torch.version.hip is None and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return ("cuda", major * 10 + minor, 32)
    from triton.runtime import driver

    target = driver.active.get_current_target()
    return (target.backend, target.arch, target.warp_size)


def remember(key: BinaryKey | None, record: dict | None) -> None:
    """Keep ``record`` (``triton_compile_worker.record_of``) under ``key``, unless kept."""
    if key is None or record is None or (path := key.path()).exists():
        return
    write_entry(path, json.dumps(record).encode())
    counters["triton_binaries"]["recorded"] += 1


def was_loaded(kernel: Any) -> bool:
    """Whether :func:`load` made ``kernel`` (its record is kept already)."""
    return getattr(kernel, "_kiln_loaded", False)


def load(key: BinaryKey | None, through_triton: bool = False) -> Any | None:
    """The compiled kernel of ``key``: a ``cuda_launch.StoredKernel`` where its record holds
    its binary (a kernel ``DirectLaunch`` launches), else (or ``through_triton``) Triton's
    ``CompiledKernel`` from Triton's cache; None where no record or no cached binary is
    there (the caller compiles it through Triton's JIT)."""
    if key is None:
        return None
    path = key.path()
    try:
        data = read_entry(path)
    except Damaged:
        discard(path)
        return None
    if data is None:
        return None
    record = json.loads(data)
    direct = record.get("direct")
    if direct is not None and not through_triton:
        from .cuda_launch import StoredKernel

        signature = {_as_triton_had_it(k): v for k, v in record["signature"]}
        binary = base64.b64decode(direct["binary"])
        kernel = StoredKernel(
            record["name"], binary, direct["num_warps"], direct["shared"], signature
        )
        kernel._kiln_loaded = True
        counters["triton_binaries"]["loaded"] += 1
        return kernel
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.cache import get_cache_manager

    group = get_cache_manager(record["hash"]).get_group(f"{record['name']}.json")
    if group is None:
        return None  # Triton's cache was emptied: compile again
    # the metadata and the binary: ``CompiledKernel`` reads every file it is given, and the
    # IR texts (ttir, ttgir, llir, ptx) are for debugging (a warm hf_bert step read 101
    # kernels' on the H200)
    group = {k: v for k, v in group.items() if k.endswith(_LOADED_SUFFIXES)}
    source = SimpleNamespace(
        constants={_as_triton_had_it(k): v for k, v in record["constants"]},
        signature={_as_triton_had_it(k): v for k, v in record["signature"]},
        fn=SimpleNamespace(arg_names=record["arg_names"], launch_metadata=None),
    )
    kernel = CompiledKernel(source, group, record["hash"])
    kernel._kiln_loaded = True
    counters["triton_binaries"]["loaded"] += 1
    return kernel


def _as_triton_had_it(value: Any) -> Any:
    """A record's key as Triton had it: a list was a tuple (an argument's index path)."""
    return tuple(value) if isinstance(value, list) else value


def _toolchain() -> tuple[str, ...]:
    """Triton's version and the environment variables that change how it compiles."""
    env = sorted(
        f"{k}={v}"
        for k, v in os.environ.items()
        if k.startswith(("TRITON_", "MLIR_", "LLVM_")) and k not in _NOT_IN_KEY
    )
    return (triton_version(), *env)


@functools.cache
def triton_version() -> str:
    """Triton's version, from its installation's metadata: importing Triton would take a
    warm start 0.1 s (its ``@jit`` functions read their sources)."""
    for distribution in ("triton", "pytorch-triton", "pytorch-triton-rocm"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    import triton  # installed without metadata (a source tree on the path)

    return triton.__version__
