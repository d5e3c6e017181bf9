"""A graph's generated Triton kernels at run time: their source and how the wrapper launches
each (:class:`KernelLaunch`), and how they load (:meth:`TritonModule.load`).

Apart from the generator (``triton``), so that a process that loads compiled graphs from the
plan cache never imports the generator, the IR or sympy.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import threading
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

from ..autotune.tuner import TuningSettings
from .triton_launch import compile_at_once, launcher_for, use_triton_cache

if TYPE_CHECKING:
    from ..sizes import Size
    from .triton_templates import TemplateLaunch


@dataclass(frozen=True)
class KernelLaunch:
    """How the wrapper calls one kernel: its grid and block sizes, fixed at compile time. A
    kernel that takes sizes (``size_params``) is called as ``(xnumel, *params, *sizes)``: its
    launcher computes the grid of each call from ``xnumel``."""

    name: str
    params: tuple[str, ...]  # buffer names, in argument order
    grid: tuple[int, ...]  # with ``size_params``: the first call's, which compiles it
    meta: tuple[tuple[str, int], ...]
    num_warps: int
    dtypes: tuple[torch.dtype, ...]  # of the params' buffers: what Triton specializes on
    device: str
    # what the autotuner varies: XBLOCK over ``xnumel``; an RBLOCK over its inner elements
    # when they loop (more than the block), and which params hold values from before the
    # kernel (scatter targets, mutated inputs): benchmark runs write into copies of those
    xnumel: Size
    rnumels: tuple[tuple[str, Size], ...]
    in_place: tuple[bool, ...]
    size_params: tuple[str, ...] = ()  # the size symbols it takes after the buffers


@dataclass(frozen=True)
class TritonModule:
    """The Triton source of one graph's kernels and their launches; pickles for the plan cache."""

    source: str
    launches: tuple[KernelLaunch, ...]
    # tune at their first call: every kernel (max_autotune), or those with a reduction (light)
    autotune: TuningSettings | None = None
    # matmul and convolution templates (``triton_templates.py``), each tuned against aten at
    # its first call
    templates: tuple[TemplateLaunch, ...] = ()
    template_tuning: TuningSettings | None = None

    def load(self, namespace: dict[str, Any], fresh: bool = False) -> None:
        """Write the source to a file (Triton reads a kernel's source from its file, in a folder
        of this process's own: one in the cache could hold someone else's code) and bind
        each kernel's launcher into ``namespace``, the wrapper's globals (where a tuned kernel
        puts its winner in its own place). ``fresh``: generated just now, so the module is
        imported and its kernels go to the compile workers; a plan-cache load finds them in
        Triton's cache, and imports the module only if one is missing (``KernelModule``)."""
        from torchkiln.plugin import private_cache_dir, scratch_dir

        digest = hashlib.sha256(self.source.encode()).hexdigest()[:24]
        path = scratch_dir() / f"kiln_{digest}.py"
        if not path.exists():
            path.write_text(self.source)
        module = KernelModule(path, self.source)
        if fresh or os.environ.get("TRITON_INTERPRET") == "1":
            module = module.imported()  # its kernels compile now (the interpreter runs them)
        root = private_cache_dir()  # Triton's cache holds libraries it loads: only a trusted one
        if root is not None:
            use_triton_cache(root)
        templates = {}
        if self.templates:
            from ..autotune.templates import tuned_templates

            templates = tuned_templates(module, self.templates, self.template_tuning, namespace)
            namespace.update(templates)
        tuned = {}
        if self.autotune is not None:
            from ..autotune.triton_kernels import tuned_launchers

            tuned = tuned_launchers(module, self.launches, self.autotune, namespace)
        untuned = [k for k in self.launches if k.name not in tuned]
        launchers = {
            k.name: launcher_for(
                getattr(module, k.name), k.grid, dict(k.meta), k.num_warps, sizes=k.size_params
            )
            for k in untuned
        }
        kernels = [(launchers[k.name], k.dtypes, k.device) for k in untuned]
        # a fresh graph's workers compile the candidates of every tuned kernel and template
        # too, in one batch (duplicates: kernels of the same text share a function)
        tuning = [*tuned.values(), *templates.values()] if fresh else []
        jobs = list(dict.fromkeys(job for kernel in tuning for job in kernel.worker_jobs()))
        compile_at_once(kernels, in_workers=fresh, jobs=jobs)
        namespace.update(launchers)
        namespace.update(tuned)


class KernelModule:
    """A generated module of Triton kernels, imported at the first need of a kernel's function.

    A graph loaded from the plan cache finds each compiled kernel by torchkiln's key
    (``triton_binaries``): its module's file and the kernel's name, its arguments and launch
    options. Until one must compile, its launchers hold an :class:`UnimportedKernel` of
    this module, and the module is not imported: Triton's ``@jit`` reads each function's
    source with ``inspect`` (0.08 s of hf_bert's warm training step on the H200, beside
    compiling and running the module's source)."""

    def __init__(self, path, source: str):
        self.path = str(path)
        self._source = source
        self._module: ModuleType | None = None
        self._lock = threading.Lock()  # a graph's launchers compile on a pool of threads

    def __getattr__(self, name: str) -> UnimportedKernel:
        if name.startswith("__"):
            raise AttributeError(name)
        decorator = re.search(rf"^@triton\.jit(\(.*\))?\ndef {name}\(", self._source, re.M)
        if decorator is None:
            raise AttributeError(f"{os.path.basename(self.path)} has no kernel {name!r}")
        return UnimportedKernel(self, name, "debug=True" in (decorator.group(1) or ""))

    def imported(self) -> ModuleType:
        with self._lock:
            if self._module is None:
                spec = importlib.util.spec_from_file_location(
                    os.path.basename(self.path)[:-3], self.path
                )
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                self._module = module
            return self._module


class UnimportedKernel:
    """A kernel of a :class:`KernelModule` before its import: what a launcher reads to find
    the kernel's binary by key (``fn.__code__``'s file and name, as a ``JITFunction`` has
    them; ``debug``, whether it keeps asserts) here; anything else (``warmup``: a compile)
    from the function itself, imported with its module."""

    def __init__(self, module: KernelModule, name: str, debug: bool):
        self._module = module
        self._name = name
        self.fn = SimpleNamespace(__code__=SimpleNamespace(co_filename=module.path, co_name=name))
        self.debug = debug

    def __getattr__(self, attribute: str) -> Any:
        return getattr(getattr(self._module.imported(), self._name), attribute)
