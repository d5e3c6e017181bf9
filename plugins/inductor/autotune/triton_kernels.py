"""Tuning the generated Triton kernels of a graph: each at its first call, on its real inputs.

:func:`tuned_launchers` gives the wrapper one :class:`TunedKernel` per kernel it tunes in
place of its launcher: every kernel under ``max_autotune``, those with a reduction under light
tuning (``TuningSettings.light``, the default mode's). Its first call tunes (``tuner.tune``
over ``configs.candidates``, or ``configs.light_candidates`` timed by
:func:`light_benchmark`, or the winner stored by an earlier process), launches the winner and
puts it in the wrapper's namespace under the kernel's name: later calls go straight to the
winner, at an untuned launch's cost.
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

import torch

from ..codegen.triton_binaries import triton_version
from ..codegen.triton_launch import is_interpreted, launcher_for
from ..codegen.triton_module import KernelLaunch
from ..codegen.triton_workers import CompileJob, compile_job, precompile
from .configs import TritonConfig, candidates, light_candidates
from .tuner import Benchmark, Choice, TuningSettings, quick_gpu_median_ms, tune


class TunedKernel:
    """A kernel's launcher until its first call, which tunes it (see the module docstring)."""

    def __init__(self, fn, launch: KernelLaunch, settings: TuningSettings, namespace: dict):
        self._fn = fn
        self._launch = launch
        self._settings = settings
        self._namespace = namespace

    def __call__(self, *tensors: torch.Tensor) -> None:
        launch = self._launch
        configs = {config.name: config for config in self._configs()}
        choices = [self._choice(config) for config in configs.values()]
        problem = tuning_problem(launch.name, tensors)

        def warm(chosen: list[Choice]) -> None:
            launches = [configs[c.name].launch(launch.xnumel) for c in chosen]
            precompile_launches(self._fn, tensors, launches)

        light = self._settings.light
        benchmark = light_benchmark(tensors) if light else None
        if light and benchmark is None:
            winner = choices[0].build(tensors)  # the heuristic: nothing to time it by
        else:  # light tuning's configs compiled with the graph's kernels (worker_jobs)
            winner = tune(
                launch.name,
                problem,
                choices,
                tensors,
                launch.in_place,
                self._settings,
                benchmark,
                warm=None if light else warm,
            )
        self._namespace[launch.name] = winner
        winner(*tensors)

    def worker_jobs(self) -> list[CompileJob]:
        """The candidates' compiles, for the worker batch of a fresh graph's load
        (``compile_at_once``): the first call then only loads them. One batch keeps every
        worker busy; compiled kernel by kernel at their first calls, each kernel waited for
        its slowest candidate (on an H200, mlp's max-autotune inference: 49 of 58 s were
        that wait). None for the interpreter."""
        if is_interpreted(self._fn):
            return []
        launch = self._launch
        return [
            compile_job(self._fn, launch.dtypes, *c.launch(launch.xnumel)) for c in self._configs()
        ]

    def _configs(self) -> list[TritonConfig]:
        configs = light_candidates if self._settings.light else candidates
        return configs(self._launch)[: self._settings.max_trials]

    def _choice(self, config: TritonConfig) -> Choice:
        def build(tensors: tuple[torch.Tensor, ...]):
            return compiled(launcher_for(self._fn, *config.launch(self._launch.xnumel)), tensors)

        return Choice(config.name, build)


def precompile_launches(fn, tensors: tuple[torch.Tensor, ...], launches: list[tuple]) -> None:
    """Compile Triton function ``fn`` for ``tensors`` in each ``(grid, meta, num_warps,
    num_stages)`` of ``launches`` in worker processes (``triton_workers``): the candidates'
    builds then load them from Triton's disk cache. Nothing to do for the interpreter."""
    if is_interpreted(fn) or not tensors[0].is_cuda:
        return
    dtypes = tuple(t.dtype for t in tensors)
    jobs = [compile_job(fn, dtypes, *launch) for launch in launches]
    with torch.cuda.device(tensors[0].device):
        precompile(jobs)


def compiled(launcher, tensors: tuple[torch.Tensor, ...]):
    """``launcher``, compiled and loaded for ``tensors`` on their GPU (a worker thread's
    current GPU is the first: Triton compiles and loads for the current one)."""
    device = tensors[0].device
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        launcher.compile_for(tensors)
    return launcher


def tuning_problem(name: str, tensors: tuple[torch.Tensor, ...]) -> tuple:
    """What a winner is valid for besides its candidates: the kernel (``name``, the hash of
    its source), the device, and the arguments' sizes, strides and dtypes."""
    shapes = [(tuple(t.shape), t.stride(), t.dtype) for t in tensors]
    return (name, device_fingerprint(tensors[0].device), shapes)


def tuned_launchers(
    module: Any, launches: tuple[KernelLaunch, ...], settings: TuningSettings, namespace: dict
) -> dict[str, TunedKernel]:
    """A :class:`TunedKernel` per launch of the imported Triton ``module`` that ``settings``
    tune: all, or with light ones, those with a reduction (tiled over inner elements), where
    the heuristic is least sure, of ``settings.min_elements`` or more; pointwise kernels keep
    it. So do kernels that take sizes (symbolic graphs): a winner measured at the first call's
    sizes would serve every other, and the store keys winners by the arguments' sizes."""
    return {
        k.name: TunedKernel(getattr(module, k.name), k, settings, namespace)
        for k in launches
        if (k.rnumels or not settings.light)
        and not k.size_params
        and _elements(k) >= settings.min_elements
    }


def _elements(launch: KernelLaunch) -> int:
    """The kernel's loop iterations: its outer elements times its inner ones (static sizes)."""
    return int(launch.xnumel) * math.prod(int(n) for _, n in launch.rnumels)


def light_benchmark(tensors: tuple[torch.Tensor, ...]) -> Benchmark | None:
    """How light tuning times a kernel's candidates on ``tensors``: a few launches timed by
    CUDA events; ``None`` off the GPU (Triton's interpreter, whose times say nothing of a
    GPU's): the kernel keeps the heuristic. Tests replace it to tune on the interpreter."""
    if tensors[0].is_cuda:
        return functools.partial(quick_gpu_median_ms, device=tensors[0].device)
    return None


@functools.cache
def device_fingerprint(device: torch.device) -> str:
    """What a winner is valid for besides the kernel: the GPU model and the Triton and CUDA
    versions (on CPU, Triton's interpreter)."""
    if device.type != "cuda":
        return f"{device.type} interpreter, triton {triton_version()}"
    name = torch.cuda.get_device_name(device)
    capability = torch.cuda.get_device_capability(device)
    return f"{name} sm{capability}, triton {triton_version()}, cuda {torch.version.cuda}"
