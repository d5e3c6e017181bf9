"""The variants of a graph's C++ kernels: their sources, and the libraries they are built into.

:func:`variant_sources` generates one kernel in each of the candidate configs
(``cpp_configs``), keeping those whose source differs from every earlier one's (the
heuristic's is the graph's own kernel: its library stays the one the graph has without
max_autotune). :class:`VariantLibrary` builds the variants at the first call that asks for
one (a process that finds every stored winner to be the heuristic builds nothing), through
``cpp_build``'s cache on disk: one translation unit per config, holding that config's
variants of the graph's kernels (split in units of at most :data:`KERNELS_PER_UNIT`), their
compilers running at the same time (at most one per core).

A variant that does not compile costs itself only: when a translation unit fails, its
variants are compiled again in halves, and each half that fails is split again, down to
the variants that fail alone (each skipped by the tuner, which logs the compiler's error).
One failing variant among a config's n costs about 2 log2(n) more compiler runs; failures
are not remembered across processes (only libraries that built are cached).
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from torchkiln import logs
from torchkiln.exc import KilnError

from ..codegen.cpp import GeneratedKernel, generate_kernel, translation_unit
from ..codegen.runtime import bind_kernel
from ..cpp_build import load_library
from ..host import usable_cores
from ..ir import GraphIR
from ..kernel_plan import KernelPlan
from .cpp_configs import CppConfig

#: most variants in one translation unit: a config's variants of a graph with many kernels
#: (the serial ones of convnet's 74 training kernels) compile in several units at once
KERNELS_PER_UNIT = 16


def variant_sources(
    plan: KernelPlan,
    graph: GraphIR,
    heuristic: GeneratedKernel,
    configs: Sequence[CppConfig],
    threads: int | None,
    parallel_threshold: int,
) -> list[tuple[str, GeneratedKernel]]:
    """``(config name, kernel)`` of ``plan`` in each of ``configs``: the first (the
    heuristic's) is ``heuristic``, the graph's own kernel; a later config whose source comes
    out as an earlier one's is left out."""
    out = [(configs[0].name, heuristic)]
    seen = {heuristic.name}
    for config in configs[1:]:
        kernel = generate_kernel(
            plan, graph, config.simdlen, threads, parallel_threshold, config.serial
        )
        if kernel.name not in seen and kernel.params == heuristic.params:
            seen.add(kernel.name)
            out.append((config.name, kernel))
    return out


class VariantLibrary:
    """The variants' functions by name, from the libraries of ``groups`` (each config's
    variants, in units of at most :data:`KERNELS_PER_UNIT`), built at the first
    :meth:`function` call; concurrent callers wait for it."""

    def __init__(self, groups: Sequence[Sequence[GeneratedKernel]], opt_level: str):
        self._units = [
            unit for group in groups for unit in _units(list({k.name: k for k in group}.values()))
        ]
        self._kernels = {k.name: k for unit in self._units for k in unit}
        self._opt_level = opt_level
        self._lock = threading.Lock()
        self._libraries: dict[str, ctypes.CDLL] | None = None
        self._failed: dict[str, str] = {}

    def function(self, name: str):
        """The ctypes function of variant ``name``; raises :class:`KilnError` if it does not
        compile."""
        with self._lock:
            if self._libraries is None:
                self._libraries, self._failed = self._build()
        if name in self._failed:
            raise KilnError(f"{name} does not compile: {self._failed[name]}")
        kernel = self._kernels[name]
        return bind_kernel(
            self._libraries[name], name, len(kernel.params), bool(kernel.index_sizes)
        )

    def _build(self) -> tuple[dict[str, ctypes.CDLL], dict[str, str]]:
        start = time.monotonic()
        workers = max(1, min(len(self._units), usable_cores()))
        with ThreadPoolExecutor(workers, thread_name_prefix="cpp-variants") as pool:
            results = list(pool.map(self._build_unit, self._units))
        built = {name: lib for libraries, _ in results for name, lib in libraries.items()}
        failed = {name: why for _, failures in results for name, why in failures.items()}
        logs.artifact(
            "autotune",
            "C++ variants built in %.1f s: %d in %d libraries, %d that do not compile",
            time.monotonic() - start,
            len(self._kernels),
            len(self._units),
            len(failed),
        )
        return built, failed

    def _build_unit(self, kernels: list[GeneratedKernel]):
        return build_isolated(kernels, self._opt_level)


def _units(kernels: list[GeneratedKernel]) -> list[list[GeneratedKernel]]:
    """``kernels`` in translation units of at most :data:`KERNELS_PER_UNIT`, of even sizes."""
    count = -(-len(kernels) // KERNELS_PER_UNIT)
    return [kernels[i::count] for i in range(count)]


def build_isolated(
    kernels: list[GeneratedKernel], opt_level: str
) -> tuple[dict[str, ctypes.CDLL], dict[str, str]]:
    """(the library of each kernel that compiles, why each that doesn't fails): all in one
    library when they compile together, else halves built apart, recursively."""
    if not kernels:
        return {}, {}
    try:
        library = load_library(translation_unit(kernels), opt_level)
    except KilnError as e:
        if len(kernels) == 1:
            return {}, {kernels[0].name: _first_error(e)}
        half = len(kernels) // 2
        built, failed = build_isolated(kernels[:half], opt_level)
        more_built, more_failed = build_isolated(kernels[half:], opt_level)
        return {**built, **more_built}, {**failed, **more_failed}
    return {k.name: library for k in kernels}, {}


def _first_error(e: KilnError) -> str:
    """The compiler's first error line, else the first line of what failed."""
    lines = str(getattr(e, "inner", e)).splitlines()
    return next((line for line in lines if ": error:" in line), lines[0] if lines else repr(e))
