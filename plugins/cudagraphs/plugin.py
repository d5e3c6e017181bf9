"""Entry point of the cudagraphs plugin: the ``cudagraphs`` runtime wrapper and backend.

The runtime wrapper is what ``mode="reduce-overhead"`` (and inductor's
``triton.cudagraphs`` option) applies around any backend's compiled graphs. The
``cudagraphs`` backend is ``torchkiln.aot`` running its graphs as they are, with
that wrapper turned on by its ``record`` option (default true).
"""

from __future__ import annotations

from collections.abc import Callable

from torchkiln.plugin import Backend, Option, RuntimeWrapper, hookimpl


def compile_graph(gm, example_inputs) -> Callable:
    """The cudagraphs backend: forward and backward graphs run as they are (boxed: a
    backward frees each saved value after its last use), each recorded and replayed.

    The backward reads the values the forward computed, as eager's autograd does (the
    simple partitioner): with no compiler to fuse them, forward ops recomputed in the
    backward are kernels more (the min-cut partitioner's choice ran the memory-bound
    chain's training step at 0.83x eager on an H200)."""
    from torchkiln.aot import aot_autograd, run_boxed, simple_partition

    return aot_autograd(fw_compiler=run_boxed, partition_fn=simple_partition)(gm, example_inputs)


def make_wrapper() -> Callable:
    from torchkiln_cudagraphs.wrapper import make

    return make()


@hookimpl
def torchkiln_runtime_wrappers() -> list[RuntimeWrapper]:
    return [
        RuntimeWrapper(
            name="cudagraphs",
            make=make_wrapper,
            description=(
                "records each compiled graph into a CUDA graph and replays it (one memory pool "
                "per compiled model); graphs on the CPU run without, said once"
            ),
            modes=("reduce-overhead",),
        )
    ]


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            name="cudagraphs",
            compile_fn=compile_graph,
            description="records the graph into CUDA graphs and replays them (less launch overhead)",
            tags=("gpu-only",),
            device="cuda",
            options=(
                Option(
                    "record",
                    True,
                    "record the graphs into CUDA graphs (False: run them as aot_eager does)",
                    bool,
                    runtime_wrapper="cudagraphs",
                ),
            ),
            modes={"reduce-overhead": {"record": True}},
        )
    ]
