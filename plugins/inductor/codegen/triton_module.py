"""A graph's generated Triton kernels at run time: their source and how the wrapper launches
each (:class:`KernelLaunch`), and how they load (:meth:`TritonModule.load`).

Apart from the generator (``triton``), so that a process that loads compiled graphs from the
plan cache never imports the generator, the IR or sympy.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
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
        """Import the source (Triton reads a kernel's source from its file, written to a folder
        of this process's own: one in the cache could hold someone else's code) and bind
        each kernel's launcher into ``namespace``, the wrapper's globals (where a tuned kernel
        puts its winner in its own place). ``fresh``: generated just now, so its kernels go
        to the compile workers; a plan-cache load finds them in Triton's cache."""
        from torchkiln.plugin import private_cache_dir, scratch_dir

        digest = hashlib.sha256(self.source.encode()).hexdigest()[:24]
        path = scratch_dir() / f"kiln_{digest}.py"
        if not path.exists():
            path.write_text(self.source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
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
        # the candidates of every tuned kernel and template, in one batch (duplicates: kernels
        # of the same text share a function)
        tuning = [*tuned.values(), *templates.values()]
        jobs = list(dict.fromkeys(job for kernel in tuning for job in kernel.worker_jobs()))
        compile_at_once(kernels, in_workers=fresh, jobs=jobs)
        namespace.update(launchers)
        namespace.update(tuned)
