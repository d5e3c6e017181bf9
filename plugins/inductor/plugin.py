"""Registers the ``inductor`` backend (light: the compiler is imported on first compile)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from torchkiln.plugin import Backend, hookimpl

from .options import MODE_OPTIONS, OPTIONS


def compile_fn(gm: Any, example_inputs: list[Any], **options: Any) -> Callable:
    from .backend import compile_graph

    return compile_graph(gm, example_inputs, **options)


def prepare(devices: set[Any]) -> None:
    """A frame with CUDA tensors begins its capture: start Triton's compile workers now. Their
    zygote takes a second or two to import and warm Triton (more where Python has no bytecode
    caches); started at the graph's compile, after the capture, mlp's first training step on
    the H200 waited 0.9 s for them with its kernels generated."""
    gpu = next((d for d in devices if d.type == "cuda"), None)
    if gpu is not None and os.environ.get("TRITON_INTERPRET") != "1":
        from .codegen.triton_workers import warm_pool

        warm_pool(gpu)


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            "inductor",
            compile_fn,
            description="loop-level IR, fusion, C++/OpenMP kernels on CPU, Triton kernels on GPU",
            options=OPTIONS,
            modes=MODE_OPTIONS,
            # symbolic graphs get C++ kernels that take sizes as arguments; what the inductor
            # can't compile symbolically raises NeedsStaticShapes: the core compiles it per size
            dynamic_shapes=True,
            # nonzero, x[mask]... run as aten calls; kernels after them take the sizes read
            # off their results (unbacked symbols) as arguments
            data_dependent_sizes=True,
            prepare=prepare,
        )
    ]
