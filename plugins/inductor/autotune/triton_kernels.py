"""Tuning the generated Triton kernels of a graph: each at its first call, on its real inputs.

:func:`tuned_launchers` gives the wrapper one :class:`TunedKernel` per kernel in place of
its launcher. Its first call tunes (``tuner.tune`` over ``configs.candidates``, or the winner
stored by an earlier process), launches the winner and puts it in the wrapper's namespace
under the kernel's name: later calls go straight to the winner, at an untuned launch's cost.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch

from ..codegen.triton import KernelLaunch
from ..codegen.triton_launch import launcher_for
from ..codegen.triton_workers import compile_job, precompile
from .configs import TritonConfig, candidates
from .tuner import Choice, TuningSettings, tune


class TunedKernel:
    """A kernel's launcher until its first call, which tunes it (see the module docstring)."""

    def __init__(self, fn, launch: KernelLaunch, settings: TuningSettings, namespace: dict):
        self._fn = fn
        self._launch = launch
        self._settings = settings
        self._namespace = namespace

    def __call__(self, *tensors: torch.Tensor) -> None:
        launch = self._launch
        configs = {config.name: config for config in candidates(launch)}
        choices = [self._choice(config) for config in configs.values()]
        problem = tuning_problem(launch.name, tensors)

        def warm(chosen: list[Choice]) -> None:
            settings = [configs[c.name] for c in chosen]
            launches = [
                (c.grid(launch.xnumel), dict(c.meta), c.num_warps, c.num_stages) for c in settings
            ]
            precompile_launches(self._fn, tensors, launches)

        winner = tune(
            launch.name, problem, choices, tensors, launch.in_place, self._settings, warm=warm
        )
        self._namespace[launch.name] = winner
        winner(*tensors)

    def _choice(self, config: TritonConfig) -> Choice:
        def build(tensors: tuple[torch.Tensor, ...]):
            grid = config.grid(self._launch.xnumel)
            launcher = launcher_for(
                self._fn, grid, dict(config.meta), config.num_warps, config.num_stages
            )
            return compiled(launcher, tensors)

        return Choice(config.name, build)


def precompile_launches(fn, tensors: tuple[torch.Tensor, ...], launches: list[tuple]) -> None:
    """Compile Triton function ``fn`` for ``tensors`` in each ``(grid, meta, num_warps,
    num_stages)`` of ``launches`` in worker processes (``triton_workers``): the candidates'
    builds then load them from Triton's disk cache. Nothing to do for the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(fn, InterpretedFunction) or not tensors[0].is_cuda:
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
    """A :class:`TunedKernel` per launch of the imported Triton ``module``."""
    return {k.name: TunedKernel(getattr(module, k.name), k, settings, namespace) for k in launches}


@functools.cache
def device_fingerprint(device: torch.device) -> str:
    """What a winner is valid for besides the kernel: the GPU model and the Triton and CUDA
    versions (on CPU, Triton's interpreter)."""
    import triton

    if device.type != "cuda":
        return f"{device.type} interpreter, triton {triton.__version__}"
    name = torch.cuda.get_device_name(device)
    capability = torch.cuda.get_device_capability(device)
    return f"{name} sm{capability}, triton {triton.__version__}, cuda {torch.version.cuda}"
