"""The inductor backend's option schema and modes, and their parsing.

Options arrive as ``compile_fn(gm, example_inputs, **{"cpp.threads": 4})``.
Each option is declared once, here: its schema entry (checked by the core,
``torchkiln.plugin.check_options``) and, for those the compiler reads, the
:class:`InductorOptions` field it fills. Declared-but-unbuilt options carry
``implemented=False``: passing them with a non-default value raises
:class:`~torchkiln.exc.NotImplementedYet`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import make_dataclass
from typing import Any

from torchkiln.exc import InvalidOptionError
from torchkiln.plugin import Option, check_options

#: The options the compiler reads, each with the :class:`InductorOptions` field it fills.
_FIELDS: tuple[tuple[str, Option], ...] = (
    (
        "threads",
        Option(
            "cpp.threads",
            None,
            "OpenMP threads per kernel (None: OpenMP's default)",
            (int, type(None)),
            minimum=1,
        ),
    ),
    (
        "simdlen",
        Option(
            "cpp.simdlen",
            32,
            "independent accumulator lanes per reduction (lets gcc vectorize)",
            int,
            minimum=1,
        ),
    ),
    (
        "opt_level",
        Option(
            "cpp.opt_level",
            "O3",
            "gcc optimisation level for generated kernels",
            str,
            choices=("O0", "O1", "O2", "O3"),
        ),
    ),
    (
        "parallel_threshold",
        Option(
            "cpp.parallel_threshold",
            32768,
            "elements of work below which a kernel runs on one thread",
            int,
            minimum=0,
        ),
    ),
    (
        "cpu_backend",
        Option(
            "cpu_backend",
            "cpp",
            'code generator for CPU tensors: "cpp" (C++/OpenMP) or "triton" (Triton kernels run '
            "by its interpreter: set TRITON_INTERPRET=1 before triton is imported; for testing "
            "the GPU path without a GPU)",
            str,
            choices=("cpp", "triton"),
        ),
    ),
    (
        "fallback_random",
        Option(
            "fallback_random",
            False,
            "run random ops (rand, randn, dropout, bernoulli) as aten calls, to match eager's "
            "numbers",
            bool,
        ),
    ),
    (
        "fuse_attention",
        Option(
            "fuse_attention",
            True,
            "rewrite attention written out by hand (softmax(q @ k^T * scale + mask) @ v) into "
            "one scaled_dot_product_attention call: fused kernels that never materialize the "
            "scores (fuse_attention.py says which forms, and what differs: NaN gradients of "
            "rows that mask every key)",
            bool,
        ),
    ),
    (
        "epilogue_fusion",
        Option(
            "epilogue_fusion",
            True,
            "fuse pointwise consumers into the loops of the reductions that feed them",
            bool,
        ),
    ),
    (
        "max_autotune",
        Option(
            "max_autotune",
            False,
            "benchmark the candidates of each generated kernel on the real inputs at its first "
            "call and keep the fastest (stored on disk: a second process tunes nothing): block "
            "sizes, warps and stages of a Triton kernel; OpenMP or serial loops and the "
            "reduction lanes (cpp.simdlen, a half, a quarter) of a C++ kernel; and turn on "
            "max_autotune_gemm",
            bool,
        ),
    ),
    (
        "max_autotune_gemm",
        Option(
            "max_autotune_gemm",
            False,
            "each matmul (mm, addmm, bmm) and 2-D convolution (not grouped, not transposed) on "
            "the Triton target measures, at its first call, the aten call plus its pointwise "
            "epilogue as a kernel of its own against Triton templates with the epilogue fused "
            "into their store, and keeps the fastest (stored on disk); max_autotune turns it "
            "on too",
            bool,
        ),
    ),
    (
        "autotune_light",
        Option(
            "autotune.light",
            True,
            "without max_autotune, tune each Triton kernel with a reduction of 2**23 elements "
            "or more at its first call on CUDA tensors: its heuristic config, the same with "
            "twice the num_warps and with each looping RBLOCK halved (4 configs at most, "
            "compiled with the graph's other kernels), each timed by the median of up to 5 "
            "launches (CUDA events, about 10 ms of runs at most, 50 ms a kernel), the fastest "
            "kept and stored on disk (a second process times nothing); pointwise kernels, "
            "smaller reductions, and kernels run by Triton's interpreter (CPU tensors), keep "
            "the heuristic",
            bool,
        ),
    ),
    (
        "autotune_max_trials",
        Option(
            "autotune.max_trials",
            12,
            "most candidate configs benchmarked per kernel, the heuristic's first",
            int,
            minimum=1,
        ),
    ),
    (
        "autotune_time_budget_s",
        Option(
            "autotune.time_budget_s",
            60.0,
            "seconds one kernel's tuning may take; candidates left when it runs out are skipped "
            "and the fastest so far is kept",
            (int, float),
            minimum=0,
        ),
    ),
    (
        "trace",
        Option(
            "trace.enabled",
            False,
            "write the graphs, the IR before and after fusion and the generated code to a folder",
            bool,
        ),
    ),
    (
        "trace_dir",
        Option(
            "trace.dir",
            None,
            "the folder for trace.enabled (default ./torchkiln_trace)",
            (str, type(None)),
        ),
    ),
    (
        "graph_diagram",
        Option(
            "trace.graph_diagram",
            False,
            "draw the fused graph as an SVG image (needs pydot and graphviz)",
            bool,
        ),
    ),
)

#: The whole schema: the compiler's options, then those it never sees (a runtime
#: wrapper the core applies, options not built yet).
OPTIONS: tuple[Option, ...] = (
    *(option for _, option in _FIELDS),
    Option(
        "triton.cudagraphs",
        False,
        "CUDA graphs for GPU graphs (the core's cudagraphs runtime wrapper, applied around "
        "the compiled graphs); CPU graphs run without them and say so once, as in torch.compile",
        bool,
        runtime_wrapper="cudagraphs",
    ),
    Option("shape_padding", False, "pad matmul shapes to fast multiples", bool, implemented=False),
    Option(
        "freezing",
        False,
        "fold parameters into the compiled graph as constants",
        bool,
        implemented=False,
    ),
)

MODE_OPTIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"triton.cudagraphs": True},
    "max-autotune": {"max_autotune": True, "triton.cudagraphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}


#: What the compiler reads: one field per entry of ``_FIELDS``, with its default.
InductorOptions = make_dataclass(
    "InductorOptions",
    [(name, Any, option.default) for name, option in _FIELDS],
    frozen=True,
)
InductorOptions.__module__ = __name__  # for pickle (make_dataclass's module= needs Python 3.12)
InductorOptions.__doc__ = "The inductor options the compiler reads, parsed (``parse_options``)."


def parse_options(options: Mapping[str, Any]) -> InductorOptions:
    """Check ``options`` against the schema and turn them into :class:`InductorOptions`."""
    given = check_options("inductor", OPTIONS, options)
    for option in OPTIONS:
        if option.runtime_wrapper is not None and option.name in given:
            raise InvalidOptionError(
                f"inductor option {option.name!r} turns on the {option.runtime_wrapper!r} "
                "runtime wrapper, which torchkiln.compile applies around the compiled graphs: "
                f"pass it to torchkiln.compile(..., backend='inductor', "
                f"options={{{option.name!r}: True}})"
            )
    return InductorOptions(
        **{name: given[option.name] for name, option in _FIELDS if option.name in given}
    )
