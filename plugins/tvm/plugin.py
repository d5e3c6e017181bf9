"""Entry point of the tvm backend plugin: aten FX → Relax → ``tvm.compile`` → Relax VM.

The backend declares its capabilities (the aten ops with a converter,
``torchkiln_tvm.converters``): the core traces forward, backward and inference graphs
with the AOT layer, partitions them, and calls ``compile_aten_graph`` on each part TVM
converts; the rest (backward convolutions, pooling backward, random ops, ...) runs
with the next backend of the chain (``backend=["tvm", "inductor"]``; eager when tvm is
named alone). Tagged experimental: untuned TVM CPU code is slower than eager's.
"""

from __future__ import annotations

from torchkiln.plugin import Backend, Capabilities, Option, Requirement, hookimpl

#: What MetaSchedule's tuning is declared with (``implemented=False`` until it runs).
NOT_BUILT = (
    "not implemented yet: MetaSchedule's TuneContext crashes in apache-tvm 0.27.0.post1 "
    "(see the plugin's README)"
)

OPTIONS = (
    Option(
        "target",
        None,
        "the TVM target: 'llvm' (the host CPU, with its -mcpu), 'llvm -mcpu=...', or "
        "'cuda' (needs a GPU TVM's CUDA runtime sees); default: the inputs' device",
        type=(str, type(None)),
    ),
    Option(
        "opt_level",
        3,
        "TVM's PassContext opt_level (0-4): which of its optional passes run",
        type=int,
        choices=(0, 1, 2, 3, 4),
    ),
    Option(
        "cache_dir",
        None,
        f"the folder of MetaSchedule's tuning records; {NOT_BUILT}",
        type=(str, type(None)),
        implemented=False,
    ),
    Option(
        "tuning_trials",
        0,
        f"MetaSchedule trials over the graph's tasks (0: no tuning); {NOT_BUILT}",
        type=int,
        minimum=0,
        implemented=False,
    ),
    Option(
        "tuning_time_budget_s",
        None,
        f"seconds the tuning of one graph may take; {NOT_BUILT}",
        type=(int, float, type(None)),
        minimum=0,
        implemented=False,
    ),
)


def capabilities() -> Capabilities:
    """The ops with a converter (called on the first compile: imports tvm)."""
    from torchkiln_tvm import cache
    from torchkiln_tvm.compiler import check_options, compile_aten_graph, decompositions
    from torchkiln_tvm.converters import CONVERTERS, supports

    def configure(options) -> Capabilities:
        check_options(options)
        return base

    base = Capabilities(
        compile_partition=compile_aten_graph,
        ops=frozenset(CONVERTERS),
        supports=supports,
        decompositions=decompositions,
        configure=configure,
        codec=cache.codec(),
    )
    return base


@hookimpl
def torchkiln_backends() -> list[Backend]:
    return [
        Backend(
            name="tvm",
            description="compiles the graph with Apache TVM (aten FX -> Relax -> Relax VM)",
            tags=("experimental",),
            requires=(Requirement("tvm", extra="tvm"),),
            options=OPTIONS,
            modes={"max-autotune": {"tuning_trials": 2000}},
            capabilities=capabilities,
            dynamic_shapes=False,
        )
    ]
