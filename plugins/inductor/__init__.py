"""torchkiln_inductor: the inductor backend plugin.

Pipeline (one module per stage): :mod:`.passes` (graph passes) ->
:mod:`.graph` + :mod:`.lowering` (aten -> loop IR of :mod:`.ir`, bodies
recorded as ops lists of :mod:`.loop_body`, choices per :mod:`.device`) ->
:mod:`.scheduler` (fusion) -> :mod:`.kernel_plan` (device-neutral kernel
plans) -> :mod:`.codegen.cpp` (kernels) and :mod:`.codegen.wrapper` (the
Python wrapper) -> :mod:`.cpp_build` (compile cache). :mod:`.backend` is the
entry point, :mod:`.options` the schema.
"""

from __future__ import annotations

from typing import Any

from .options import MODE_OPTIONS, OPTIONS


def list_options() -> list[str]:
    """Names of every option the backend declares (implemented or not)."""
    return [opt.name for opt in OPTIONS]


def list_mode_options(mode: str | None = None) -> dict[str, Any]:
    """The options each mode stands for (or those of one ``mode``)."""
    if mode is not None:
        return dict(MODE_OPTIONS[mode])
    return {name: dict(opts) for name, opts in MODE_OPTIONS.items()}


__all__ = ["list_mode_options", "list_options"]
