"""Tuning the generated C++ kernels of a CPU graph under max_autotune: each at its first
call, on its real inputs.

:func:`cpp_tuning` runs when the graph is generated: it makes each kernel's variants
(``cpp_configs.candidates``, sources by ``cpp_variants``) and returns the :class:`CppTuning`
record that the graph's artifact keeps (pickled with the plan). :meth:`CppTuning.install`
runs when the graph is bound: a :class:`TunedCppKernel` takes each kernel's place in the
wrapper's namespace. The wrapper calls kernels with data pointers; a tuned kernel's first
call sees the memory behind them as byte tensors (the tuner benchmarks on copies of those
the kernel writes), tunes (``tuner.tune``: the heuristic is the function of the graph's own
library, the others come from the variant library, built then), runs the winner and binds
the winner's ctypes function to the kernel's name: later calls cost an untuned kernel's.

A winner holds for the kernel's source (sizes and strides are in it) and its variants', the
compiler, the CPU and the optimization level, and the number of threads the kernel runs on
(``torch.get_num_threads()``: the libraries share torch's OpenMP runtime).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from dataclasses import dataclass
from typing import Any

import torch

from ..codegen.cpp import GeneratedKernel
from ..cpp_build import toolchain_id
from ..ir import GraphIR
from ..kernel_plan import KernelPlan
from .cpp_configs import candidates
from .cpp_variants import VariantLibrary, variant_sources
from .tuner import CPU_ROUNDS, Choice, TuningSettings, batched_min_ms, tune

#: how candidates are timed (tests replace it)
benchmark = batched_min_ms


@dataclass(frozen=True)
class KernelVariants:
    """One kernel of the graph (``name``: its heuristic source's) and its candidates."""

    name: str
    in_place: tuple[bool, ...]  # per parameter: the kernel writes it
    nbytes: tuple[int, ...]  # per parameter: the bytes the kernel may touch from its pointer
    variants: tuple[tuple[str, str], ...]  # (config name, function name), the heuristic first


@dataclass(frozen=True)
class CppTuning:
    """What tuning a graph's C++ kernels needs: its kernels' candidates, the variants'
    sources (every candidate but the heuristics, which are the graph's kernels), the
    optimization level they build at, and the tuning settings."""

    kernels: tuple[KernelVariants, ...]
    sources: tuple[tuple[GeneratedKernel, ...], ...]  # by config
    opt_level: str
    settings: TuningSettings

    def install(self, namespace: dict) -> None:
        """Put a :class:`TunedCppKernel` in the place of each kernel bound in ``namespace``."""
        library = VariantLibrary(self.sources, self.opt_level)
        for kernel in self.kernels:
            if kernel.name in namespace:
                heuristic = namespace[kernel.name]
                namespace[kernel.name] = TunedCppKernel(self, kernel, heuristic, library, namespace)

    def variant_source(self) -> str:
        """The variants' sources, for ``output_code``."""
        lines = []
        for k in self.kernels:
            lines += [f"// {k.name}: {', '.join(f'{c} {f}' for c, f in k.variants)}"]
        sources = [k.source for group in self.sources for k in group]
        return "\n".join(lines) + "\n\n" + "\n\n".join(sources)


def cpp_tuning(
    plans: dict[str, KernelPlan],
    graph: GraphIR,
    kernels: dict[str, GeneratedKernel],
    options: Any,
) -> CppTuning | None:
    """The variants of ``kernels`` (the graph's, by step name, as ``plans`` made them) in
    the first ``autotune.max_trials`` candidate configs, each to be timed in
    :data:`~.tuner.CPU_ROUNDS` rounds by :func:`~.tuner.batched_min_ms`. A kernel whose
    variants all come out as its own source (pointwise and under the parallel threshold)
    is left out: it runs as without max_autotune (``None`` when all are)."""
    settings = TuningSettings(
        options.autotune_max_trials, options.autotune_time_budget_s, rounds=CPU_ROUNDS
    )
    configs = candidates(options.simdlen)[: settings.max_trials]
    tuned: list[KernelVariants] = []
    sources: dict[str, list[GeneratedKernel]] = {}  # by config
    seen: set[str] = set()
    for step, kernel in kernels.items():
        if kernel.name in seen:  # the same source twice: one kernel
            continue
        seen.add(kernel.name)
        variants = variant_sources(
            plans[step], graph, kernel, configs, options.threads, options.parallel_threshold
        )
        if len(variants) < 2:  # nothing to choose: the kernel runs untouched
            continue
        for config, source in variants[1:]:
            sources.setdefault(config, []).append(source)
        tuned.append(
            KernelVariants(
                kernel.name,
                tuple(written for _, written in kernel.params),
                tuple(graph.buffer(name).layout.nbytes() for name, _ in kernel.params),
                tuple((config, source.name) for config, source in variants),
            )
        )
    if not tuned:
        return None
    groups = tuple(tuple(group) for group in sources.values())
    return CppTuning(tuple(tuned), groups, options.opt_level, settings)


@dataclass(frozen=True)
class VariantLaunch:
    """A candidate's ctypes function, called with tensors (their data pointers);
    ``config``: the candidate's name (for logs and tests)."""

    config: str
    fn: Any

    def __call__(self, *tensors: torch.Tensor) -> None:
        self.fn(*(t.data_ptr() for t in tensors))


class TunedCppKernel:
    """A kernel's function until its first call, which tunes it (see the module docstring)."""

    def __init__(
        self,
        tuning: CppTuning,
        kernel: KernelVariants,
        heuristic,
        library: VariantLibrary,
        namespace: dict,
    ):
        self._tuning = tuning
        self._kernel = kernel
        self._heuristic = heuristic
        self._library = library
        self._namespace = namespace

    def __call__(self, *pointers: int) -> int | None:
        kernel = self._kernel
        tensors = tuple(_memory(p, n) for p, n in zip(pointers, kernel.nbytes, strict=True))
        winner = tune(
            kernel.name,
            tuning_problem(kernel, self._tuning.opt_level),
            [self._choice(config, fn) for config, fn in kernel.variants],
            tensors,
            kernel.in_place,
            self._tuning.settings,
            benchmark,
        )
        self._namespace[kernel.name] = winner.fn
        return winner.fn(*pointers)  # a failed bounds check's number, if the kernel checks

    def _choice(self, config: str, function: str) -> Choice:
        def build(tensors: tuple[torch.Tensor, ...]) -> VariantLaunch:
            if function == self._kernel.name:
                return VariantLaunch(config, self._heuristic)
            return VariantLaunch(config, self._library.function(function))

        return Choice(config, build)


def tuning_problem(kernel: KernelVariants, opt_level: str) -> tuple:
    """What a winner holds for besides the candidates' names (see the module docstring)."""
    functions = tuple(function for _, function in kernel.variants)
    return (kernel.name, functions, opt_level, cpu_fingerprint(), torch.get_num_threads())


@functools.cache
def cpu_fingerprint() -> str:
    """The compiler and the CPU (model and flags), hashed."""
    return hashlib.sha256(toolchain_id().encode()).hexdigest()[:16]


def _memory(pointer: int, nbytes: int) -> torch.Tensor:
    """The ``nbytes`` at ``pointer`` as a byte tensor: no copy, the caller's tensor owns
    them."""
    if nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer((ctypes.c_char * nbytes).from_address(pointer), dtype=torch.uint8)
