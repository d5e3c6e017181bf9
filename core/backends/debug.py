"""The ``eager`` debug backend: runs the captured graph as it is.

Useful to tell capture problems from backend problems: if a program is
wrong under ``backend="eager"``, the capture is at fault.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from torchkiln.plugin import Backend, hookimpl


def eager(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable:
    """Run the captured torch.fx graph unchanged."""
    return gm.forward


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            name="eager",
            compile_fn=eager,
            description="runs the captured graph as it is (debugging capture)",
            tags=("debug",),
        )
    ]
