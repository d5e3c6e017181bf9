"""Tuning the generated Triton kernels of a graph: each at its first call, on its real inputs.

:func:`tuned_launchers` gives the wrapper one :class:`TunedKernel` per kernel in place of
its launcher. Its first call tunes (``tuner.tune`` over ``configs.candidates``, or the winner
stored by an earlier process), launches the winner and puts it in the wrapper's namespace
under the kernel's name: later calls go straight to the winner, at an untuned launch's cost.

Compiles don't wait for the first calls: when the graph loads, every kernel's candidates
(or its stored winner alone) start compiling together (``compile_at_once``), so that tuning
only loads and benchmarks them, instead of each kernel's compiles waiting for the last's.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch

from ..codegen.triton import KernelLaunch
from ..codegen.triton_launch import compile_at_once, launcher_for
from .configs import candidates
from .tuner import Choice, TuningSettings, stored_winner, tune


class TunedKernel:
    """A kernel's launcher until its first call, which tunes it (see the module docstring)."""

    def __init__(self, fn, launch: KernelLaunch, settings: TuningSettings, namespace: dict):
        self._launch = launch
        self._settings = settings
        self._namespace = namespace
        self._launchers = {
            config.name: launcher_for(
                fn,
                config.grid(launch.xnumel),
                dict(config.meta),
                config.num_warps,
                config.num_stages,
            )
            for config in candidates(launch)[: settings.max_trials]
        }
        self._choices = [
            Choice(name, functools.partial(compiled, launcher))
            for name, launcher in self._launchers.items()
        ]

    def to_start(self) -> list:
        """The launchers tuning will build: the stored winner alone where there is one."""
        stored = stored_winner(launch_problem(self._launch), self._choices)
        if stored in self._launchers:
            return [self._launchers[stored]]
        return list(self._launchers.values())

    def __call__(self, *tensors: torch.Tensor) -> None:
        launch = self._launch
        problem = launch_problem(launch)
        winner = tune(launch.name, problem, self._choices, tensors, launch.in_place, self._settings)
        self._namespace[launch.name] = winner
        winner(*tensors)


def compiled(launcher, tensors: tuple[torch.Tensor, ...]):
    """``launcher``, compiled and loaded for ``tensors`` on their GPU (a worker thread's
    current GPU is the first: Triton compiles and loads for the current one)."""
    device = tensors[0].device
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        launcher.compile_for(tensors)
    return launcher


def launch_problem(launch: KernelLaunch) -> tuple:
    """What a generated kernel's winner is valid for besides its candidates, known when the
    graph loads: the kernel (``name``, the hash of its source, where sizes and strides are
    literals), its arguments' dtypes and the device."""
    return (launch.name, device_fingerprint(torch.device(launch.device)), launch.dtypes)


def tuning_problem(name: str, tensors: tuple[torch.Tensor, ...]) -> tuple:
    """What a winner is valid for besides its candidates: the kernel (``name``, the hash of
    its source), the device, and the arguments' sizes, strides and dtypes."""
    shapes = [(tuple(t.shape), t.stride(), t.dtype) for t in tensors]
    return (name, device_fingerprint(tensors[0].device), shapes)


def tuned_launchers(
    module: Any, launches: tuple[KernelLaunch, ...], settings: TuningSettings, namespace: dict
) -> dict[str, TunedKernel]:
    """A :class:`TunedKernel` per launch of the imported Triton ``module``, the compiles
    their tuning needs started all at once."""
    tuned = {k.name: TunedKernel(getattr(module, k.name), k, settings, namespace) for k in launches}
    compile_at_once(
        [(launcher, k.dtypes, k.device) for k in launches for launcher in tuned[k.name].to_start()]
    )
    return tuned


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
