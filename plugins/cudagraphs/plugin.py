"""Entry point of the cudagraphs backend plugin.

Each graph goes through ``torchkiln.aot.aot_autograd``; the forward graph
and, for training, the backward graph are each recorded into a CUDA graph
by :func:`torchkiln_cudagraphs.cudagraphify` and replayed on later calls.
A graph that cannot be recorded (inputs on the CPU, dynamic shapes) runs
eagerly instead, with one warning naming the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from torchkiln.plugin import Backend, hookimpl

log = logging.getLogger("torchkiln.cudagraphs")


def compile_aten_graph(gm, example_inputs) -> Callable:
    """Record one functional aten graph, or run it eagerly when it cannot be recorded."""
    from torchkiln_cudagraphs.capture import cudagraphify, why_not_capturable

    reason = why_not_capturable(example_inputs)
    if reason is not None:
        log.warning("cudagraphs: running a graph eagerly: %s", reason)
        return gm.forward
    return cudagraphify(gm.forward, example_inputs)


def compile_graph(gm, example_inputs) -> Callable:
    """The cudagraphs backend: forward and backward graphs each recorded and replayed."""
    from torchkiln.aot import aot_autograd

    return aot_autograd(fw_compiler=compile_aten_graph)(gm, example_inputs)


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            name="cudagraphs",
            compile_fn=compile_graph,
            description="records the graph into CUDA graphs and replays them (less launch overhead)",
            tags=("gpu-only",),
            device="cuda",
        )
    ]
