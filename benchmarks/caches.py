"""Compiler caches: a fresh directory per row for cold compiles, the same one again for warm.

torch.compile keeps compiled artifacts on disk (inductor's FX graph and
AOTAutograd caches, Triton kernels) and in the process; torchkiln is
expected to honour ``TORCHKILN_CACHE_DIR``. A row points all of them at its
own directory and starts from emptied in-process caches, so its first call
is a cold compile; the warm-compile process later reuses the directory.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import torch


def cache_env(directory: Path) -> dict[str, str]:
    inductor = directory / "inductor"
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(inductor),
        "TRITON_CACHE_DIR": str(inductor / "triton"),
        "TORCHKILN_CACHE_DIR": str(directory / "torchkiln"),
    }


def reset_compilers() -> None:
    """Forget every compiled frame and empty the in-process compiler caches.

    Compilers that were never imported have nothing to forget and are not imported.
    """
    torch.compiler.reset()
    inductor_utils = sys.modules.get("torch._inductor.utils")
    if inductor_utils is not None:
        with contextlib.suppress(Exception):
            inductor_utils.clear_caches()
    openvino_backend = sys.modules.get("openvino.frontend.pytorch.torchdynamo.backend")
    if openvino_backend is not None:
        # OpenVINO's torch.compile backend keeps compiled partitions by partition number,
        # and the options of its last aot_autograd compile, for every later compile (its
        # own reset() names a function backend.py does not import)
        sys.modules["openvino.frontend.pytorch.torchdynamo.execute"].clear_caches()
        openvino_backend.openvino_options = {}
    torchkiln = sys.modules.get("torchkiln")
    if torchkiln is not None:
        with contextlib.suppress(Exception):
            # torchkiln.reset() is the API asked for; until it exists, the capture cache's reset.
            reset = getattr(torchkiln, "reset", None)
            if reset is None:
                from torchkiln.capture import reset
            reset()


@contextlib.contextmanager
def compiler_caches(directory: Path) -> Iterator[None]:
    """Compile into ``directory``'s caches, from empty in-process caches."""
    directory.mkdir(parents=True, exist_ok=True)
    env = cache_env(directory)
    saved = {key: os.environ.get(key) for key in env}
    reset_compilers()
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reset_compilers()
