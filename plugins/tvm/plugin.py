"""Entry point of the tvm backend plugin: aten FX → Relax → ``tvm.compile`` → Relax VM.

The backend declares its capabilities (the aten ops with a converter,
``torchkiln_tvm.converters``): the core traces forward, backward and inference graphs
with the AOT layer, partitions them, and calls ``compile_aten_graph`` on each part TVM
converts; the rest (backward convolutions, pooling backward, random ops, ...) runs
with the next backend of the chain (``backend=["tvm", "inductor"]``; eager when tvm is
named alone). Tagged experimental: its CPU code, with the default schedule
(``torchkiln_tvm.schedule``) or tuned by MetaSchedule (``mode="max-autotune"``,
``torchkiln_tvm.tuning``), is at eager's speed on the zoo's geomean but slower on some
models.
"""

from __future__ import annotations

from torchkiln.plugin import Backend, Capabilities, Option, Requirement, hookimpl

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
        "default_schedule",
        True,
        "on CPU, give the kernels no tuning record covers a fixed loop order and "
        "vectorization (matmuls 10x faster than TVM's plain loops); False: plain loops",
        type=bool,
    ),
    Option(
        "extern_ops",
        True,
        "have matmuls (mm, bmm, addmm) and convolutions call torch's own kernels (MKL / "
        "oneDNN on CPU, cuBLAS / cuDNN on CUDA; the TVM wheel has no BLAS) from the compiled "
        "module; False: TVM's own kernels, scheduled or tuned like the others",
        type=bool,
    ),
    Option(
        "fast_math",
        True,
        "on CPU, compute float32 exp, tanh, erf (softmax, GELU, SiLU, sigmoid) as vectorized "
        "polynomials, within 3 ulp of torch's, instead of one libm call a vector lane",
        type=bool,
    ),
    Option(
        "cache_dir",
        None,
        "the folder of MetaSchedule's tuning records, read and added to by every process "
        "that tunes (default: tvm-tuning in torchkiln's cache); needs tuning_trials > 0",
        type=(str, type(None)),
    ),
    Option(
        "tuning_trials",
        0,
        "MetaSchedule candidates measured over the graph's kernels that have no record "
        "yet, on CPU or CUDA (0: no tuning)",
        type=int,
        minimum=0,
    ),
    Option(
        "tuning_time_budget_s",
        None,
        "seconds the tuning of one graph may take, kept to within a few seconds (None: "
        "until its trials are done); needs tuning_trials > 0",
        type=(int, float, type(None)),
        minimum=0,
    ),
)


#: ``mode="max-autotune"``: MetaSchedule over each graph's kernels that have no record,
#: at most 2000 candidates and 10 minutes a graph (0.4-1.5 s a candidate on one core).
MAX_AUTOTUNE = {"tuning_trials": 2000, "tuning_time_budget_s": 600}


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
            modes={"max-autotune": MAX_AUTOTUNE},
            capabilities=capabilities,
            dynamic_shapes=False,
        )
    ]
