"""Measured choice for each matmul and convolution: the aten call (then its epilogue as a
kernel of its own), or the Triton template (``codegen/triton_templates.py``) in one of its
block configs, with the epilogue fused into its store.

:func:`tuned_templates` gives the wrapper one :class:`TunedTemplate` per template in place of
its launcher. Its first call builds the candidates (:func:`template_choices`: the aten call
first, so that ``autotune.max_trials`` always measures it, then :func:`configs_for`), keeps the
fastest (``tuner.tune``, or the winner an earlier process stored) and puts it in the wrapper's
namespace under the template's name: later calls go straight to it. The aten choice runs
the epilogue kernel in the generator's own config (``max_autotune`` tunes that kernel where it
runs alone, not inside this choice). A convolution's aten call returns a new tensor (its
``out=`` variant copies one): where the product is stored, both choices return it, and the
template's allocates it.

Matmul block configs are the well-known good tiles on Ampere and Hopper (Triton's matmul
tutorial, torch inductor's mm configs): large tiles with 3-4 pipeline stages for 2-byte
dtypes, ``BLOCK_K`` 32 for float32 (twice the shared memory per element), then smaller tiles
for small or skinny products. A convolution's ``BLOCK_K`` steps over input channels, 64 at
most (ResNet's layers have 64 to 512), tiles of 64 to 256 output positions by 32 to 256
channels. Each is clamped to the problem (no block above the next power of two of its
dimension, none below 16, ``tl.dot``'s least; a warp per 256 outputs of the tile at most) and
duplicates dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..codegen.triton import _pow2
from ..codegen.triton_launch import is_interpreted, launcher_for
from ..codegen.triton_templates import TEMPLATE_META, LibraryCall, TemplateLaunch
from ..codegen.triton_workers import CompileJob, compile_job
from .triton_kernels import compiled, precompile_launches, tuning_problem
from .tuner import Choice, TuningSettings, tune

#: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), best first, for float16 and bfloat16
HALF_CONFIGS = (
    (128, 256, 64, 3, 8),
    (256, 128, 64, 3, 8),
    (128, 128, 64, 4, 8),
    (128, 128, 64, 3, 4),
    (64, 256, 32, 4, 4),
    (128, 128, 32, 4, 4),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (128, 32, 32, 4, 4),
    (64, 32, 32, 5, 2),
    (32, 64, 32, 5, 2),
)
#: the same for float32
FLOAT32_CONFIGS = (
    (128, 128, 32, 3, 8),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (64, 64, 32, 4, 4),
    (128, 32, 32, 4, 4),
    (64, 32, 32, 5, 2),
    (32, 64, 32, 5, 2),
    (32, 32, 32, 4, 2),
    (64, 64, 16, 2, 4),
)
#: a convolution's, for float16 and bfloat16: many output positions (ResNet's early layers,
#: 200k at batch 64) by few channels, or few positions by many channels (its late ones)
CONV_HALF_CONFIGS = (
    (128, 128, 64, 3, 8),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (256, 64, 64, 3, 8),
    (64, 256, 64, 3, 8),
    (256, 128, 32, 3, 8),
    (128, 128, 32, 4, 4),
    (64, 64, 64, 4, 4),
    (128, 32, 64, 4, 4),
    (64, 32, 32, 5, 2),
)
#: the same for float32
CONV_FLOAT32_CONFIGS = (
    (128, 128, 32, 3, 8),
    (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4),
    (256, 64, 16, 3, 8),
    (64, 256, 16, 3, 8),
    (64, 64, 32, 4, 4),
    (128, 32, 32, 4, 4),
    (64, 32, 32, 5, 2),
)
#: per aten op: (the float32 configs, the float16 and bfloat16 ones)
CONFIG_TABLES = {
    "mm": (FLOAT32_CONFIGS, HALF_CONFIGS),
    "addmm": (FLOAT32_CONFIGS, HALF_CONFIGS),
    "bmm": (FLOAT32_CONFIGS, HALF_CONFIGS),
    "convolution": (CONV_FLOAT32_CONFIGS, CONV_HALF_CONFIGS),
}
#: rows of tiles per group of programs (neighbours share operand tiles in L2)
GROUP_M = 8
#: ``tl.dot``'s smallest block
MIN_BLOCK = 16


@dataclass(frozen=True)
class TemplateConfig:
    """Block sizes, warps and pipelining depth of one template launch."""

    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    num_warps: int
    group_m: int = GROUP_M

    @property
    def name(self) -> str:
        return (
            f"BLOCK_M={self.block_m},BLOCK_N={self.block_n},BLOCK_K={self.block_k},"
            f"GROUP_M={self.group_m},warps={self.num_warps},stages={self.num_stages}"
        )

    def meta(self, k: int, tf32: bool) -> dict[str, int]:
        """The template's constexprs, in its parameters' order."""
        even_k = int(k % self.block_k == 0)
        values = (self.block_m, self.block_n, self.block_k, self.group_m, even_k, int(tf32))
        return dict(zip(TEMPLATE_META, values, strict=True))

    def grid(self, launch: TemplateLaunch) -> tuple[int, int]:
        tiles = -(-launch.m // self.block_m) * -(-launch.n // self.block_n)
        return (tiles, launch.batch)

    def launch(self, launch: TemplateLaunch, tf32: bool) -> tuple:
        """(grid, constexprs, num_warps, num_stages) of ``launch`` in this config."""
        return self.grid(launch), self.meta(launch.k, tf32), self.num_warps, self.num_stages


def configs_for(launch: TemplateLaunch) -> list[TemplateConfig]:
    """The block configs for ``launch``'s op, sizes and dtype, clamped, best first."""
    float32, half = CONFIG_TABLES[launch.library.op]
    table = float32 if launch.dtype == torch.float32 else half
    out: dict[str, TemplateConfig] = {}
    for block_m, block_n, block_k, stages, warps in table:
        block_m, block_n, block_k = (
            min(block, max(MIN_BLOCK, _pow2(size)))
            for block, size in ((block_m, launch.m), (block_n, launch.n), (block_k, launch.k))
        )
        warps = max(1, min(warps, block_m * block_n // 256))
        config = TemplateConfig(block_m, block_n, block_k, stages, warps)
        out.setdefault(config.name, config)
    return list(out.values())


def tf32_allowed(launch: TemplateLaunch) -> bool:
    """Whether eager's library call may compute ``launch``'s float32 products in TF32: cuDNN's
    flag for a convolution (on by default), cuBLAS's for a matmul (off)."""
    if launch.library.op == "convolution":
        return torch.backends.cudnn.allow_tf32
    return torch.backends.cuda.matmul.allow_tf32


class TunedTemplate:
    """A template's launcher until its first call, which tunes it (see the module docstring)."""

    def __init__(self, template_fn, epilogue_fn, launch: TemplateLaunch, settings, namespace):
        self._template_fn = template_fn
        self._epilogue_fn = epilogue_fn
        self._launch = launch
        self._settings = settings
        self._namespace = namespace

    def __call__(self, *tensors: torch.Tensor) -> torch.Tensor | None:
        launch = self._launch
        tf32 = tensors[0].is_cuda and tf32_allowed(launch)
        configs = {c.name: c for c in configs_for(launch)}
        choices = template_choices(self._template_fn, self._epilogue_fn, launch, tf32)
        problem = (*tuning_problem(launch.name, tensors), f"tf32={tf32}")
        in_place = [False] * len(tensors)  # a template only reads its inputs

        def warm(chosen: list[Choice]) -> None:
            launches = [configs[c.name].launch(launch, tf32) for c in chosen if c.name in configs]
            precompile_launches(self._template_fn, _with_product(launch, tensors), launches)

        winner = tune(launch.name, problem, choices, tensors, in_place, self._settings, warm=warm)
        self._namespace[launch.name] = winner
        return winner(*tensors)

    def worker_jobs(self) -> list[CompileJob]:
        """The template's configs that tuning will measure, for the worker batch of a fresh
        graph's load (as ``TunedKernel.worker_jobs``; the aten choice's epilogue is one of
        the graph's kernels). None for the interpreter."""
        if is_interpreted(self._template_fn):
            return []
        launch = self._launch
        tf32 = tf32_allowed(launch)  # as the first call will find it, likely
        measured = configs_for(launch)[: max(0, self._settings.max_trials - 1)]  # aten first
        return [
            compile_job(self._template_fn, launch.dtypes, *c.launch(launch, tf32)) for c in measured
        ]


def template_choices(template_fn, epilogue_fn, launch: TemplateLaunch, tf32: bool) -> list[Choice]:
    """The aten call, then the template in each of :func:`configs_for` (float32 operands in
    TF32 where ``tf32``, as eager's call at the time of tuning)."""
    configs = configs_for(launch)
    templates = [_template_choice(template_fn, launch, c, tf32) for c in configs]
    return [_library_choice(epilogue_fn, launch), *templates]


def _template_choice(fn, launch: TemplateLaunch, config: TemplateConfig, tf32: bool) -> Choice:
    def build(tensors: tuple[torch.Tensor, ...]):
        launcher = launcher_for(fn, *config.launch(launch, tf32))
        compiled(launcher, _with_product(launch, tensors))
        if launch.returned is None:
            return launcher
        at = launch.returned

        def run(*tensors: torch.Tensor) -> torch.Tensor:
            product = _new_product(launch, tensors[0].device)
            launcher(*tensors[:at], product, *tensors[at:])
            return product

        return run

    return Choice(config.name, build)


def _library_choice(epilogue_fn, launch: TemplateLaunch) -> Choice:
    """The aten op into the product (``op.out``; a convolution returns it), then the epilogue
    kernel on it."""
    call = launch.library
    packet = getattr(torch.ops.aten, call.op)
    kwargs = dict(call.kwargs)
    _, stride = call.product_layout

    def product_of(tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        args = [_argument(arg, tensors) for arg in call.args]
        if not call.out_variant:
            product = packet.default(*args, **kwargs)
            # the strides the template, and kernels reading the product, index it with
            return product if product.stride() == stride else _restrided(product, stride)
        if call.product is not None:
            product = tensors[call.product]
        else:
            product = _new_product(launch, tensors[0].device)
        packet.out(*args, **kwargs, out=product)
        return product

    def build(tensors: tuple[torch.Tensor, ...]) -> Callable[..., torch.Tensor | None]:
        epilogue = None
        if call.epilogue is not None:
            k = call.epilogue
            epilogue = launcher_for(epilogue_fn, k.grid, dict(k.meta), k.num_warps)
            product = _new_product(launch, tensors[0].device)
            compiled(epilogue, _epilogue_args(call, tensors, product))

        def run(*tensors: torch.Tensor) -> torch.Tensor | None:
            product = product_of(tensors)
            if epilogue is not None:
                epilogue(*_epilogue_args(call, tensors, product))
            return product if launch.returned is not None else None

        return run

    return Choice(f"aten.{call.op}", build)


def _new_product(launch: TemplateLaunch, device: torch.device) -> torch.Tensor:
    size, stride = launch.library.product_layout
    return torch.empty_strided(size, stride, dtype=launch.dtype, device=device)


def _restrided(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _with_product(launch: TemplateLaunch, tensors: tuple[torch.Tensor, ...]) -> tuple:
    """The template function's arguments: ``tensors`` and, where the call returns the
    product, a new one in its place."""
    if launch.returned is None:
        return tensors
    at = launch.returned
    return (*tensors[:at], _new_product(launch, tensors[0].device), *tensors[at:])


def _argument(arg: tuple, tensors: tuple[torch.Tensor, ...]) -> Any:
    if arg[0] == "const":
        return arg[1]
    _, param, size, stride, offset = arg
    t = tensors[param]
    return torch.as_strided(t, size, stride, t.storage_offset() + offset)


def _epilogue_args(call: LibraryCall, tensors, product: torch.Tensor) -> tuple:
    return tuple(product if p is None else tensors[p] for p in call.epilogue_args)


def tuned_templates(
    module: Any, templates: tuple[TemplateLaunch, ...], settings: TuningSettings, namespace: dict
) -> dict[str, TunedTemplate]:
    """A :class:`TunedTemplate` per template of the imported Triton ``module``."""
    out = {}
    for launch in templates:
        epilogue = launch.library.epilogue
        epilogue_fn = getattr(module, epilogue.name) if epilogue is not None else None
        template_fn = getattr(module, launch.name)
        out[launch.name] = TunedTemplate(template_fn, epilogue_fn, launch, settings, namespace)
    return out
