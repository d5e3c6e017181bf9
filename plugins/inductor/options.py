"""The inductor backend's option schema and modes, and their parsing.

Options arrive as ``compile_fn(gm, example_inputs, **{"cpp.threads": 4})``.
Declared-but-unbuilt options carry ``implemented=False``: passing them with a
non-default value raises :class:`~torchkiln.exc.NotImplementedYet`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchkiln.exc import InvalidOptionError, NotImplementedYet
from torchkiln.plugin import Option

OPTIONS: tuple[Option, ...] = (
    Option(
        "cpp.threads", None, "OpenMP threads per kernel (None: OpenMP's default)", (int, type(None))
    ),
    Option(
        "cpp.simdlen", 32, "independent accumulator lanes per reduction (lets gcc vectorize)", int
    ),
    Option("cpp.opt_level", "O3", "gcc optimisation level for generated kernels (O1, O2, O3)", str),
    Option(
        "cpp.parallel_threshold",
        32768,
        "elements of work below which a kernel runs on one thread",
        int,
    ),
    Option(
        "cpu_backend",
        "cpp",
        'code generator for CPU tensors: "cpp" (C++/OpenMP) or "triton" (Triton kernels run '
        "by its interpreter: set TRITON_INTERPRET=1 before triton is imported; for testing "
        "the GPU path without a GPU)",
        str,
    ),
    Option(
        "fallback_random",
        False,
        "run random ops (rand, randn, dropout, bernoulli) as aten calls, to match eager's numbers",
        bool,
    ),
    Option(
        "epilogue_fusion",
        True,
        "fuse pointwise consumers into the loops of the reductions that feed them",
        bool,
    ),
    Option(
        "trace.enabled",
        False,
        "write the graphs, the IR before and after fusion and the generated code to a folder",
        bool,
    ),
    Option(
        "trace.dir",
        None,
        "the folder for trace.enabled (default ./torchkiln_trace)",
        (str, type(None)),
    ),
    Option(
        "trace.graph_diagram",
        False,
        "draw the fused graph as an SVG image (needs pydot and graphviz)",
        bool,
    ),
    Option(
        "triton.cudagraphs",
        False,
        "CUDA graphs for GPU graphs; CPU graphs run without them, as in torch.compile",
        bool,
    ),
    Option(
        "max_autotune",
        False,
        "benchmark kernel variants and keep the fastest",
        bool,
        implemented=False,
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


@dataclass(frozen=True)
class InductorOptions:
    threads: int | None = None
    simdlen: int = 32
    opt_level: str = "O3"
    parallel_threshold: int = 32768
    fallback_random: bool = False
    epilogue_fusion: bool = True
    trace: bool = False
    trace_dir: str | None = None
    graph_diagram: bool = False
    cudagraphs: bool = False
    cpu_backend: str = "cpp"


_FIELDS = {
    "cpp.threads": "threads",
    "cpp.simdlen": "simdlen",
    "cpp.opt_level": "opt_level",
    "cpp.parallel_threshold": "parallel_threshold",
    "fallback_random": "fallback_random",
    "epilogue_fusion": "epilogue_fusion",
    "trace.enabled": "trace",
    "trace.dir": "trace_dir",
    "trace.graph_diagram": "graph_diagram",
    "triton.cudagraphs": "cudagraphs",
    "cpu_backend": "cpu_backend",
}


def parse_options(options: dict[str, Any]) -> InductorOptions:
    """Check ``options`` against the schema and turn them into :class:`InductorOptions`."""
    schema = {o.name: o for o in OPTIONS}
    values = {}
    for key, value in options.items():
        opt = schema.get(key)
        if opt is None:
            raise InvalidOptionError(
                f"the inductor backend has no option {key!r}; known: {', '.join(sorted(schema))}"
            )
        if not opt.implemented:
            if value != opt.default:
                raise NotImplementedYet(f"inductor option {key!r} is not implemented yet")
            continue
        if opt.type is not None and not isinstance(value, opt.type):
            raise InvalidOptionError(f"inductor option {key!r} expects {opt.type}, got {value!r}")
        values[_FIELDS[key]] = value
    parsed = InductorOptions(**values)
    if parsed.opt_level not in ("O0", "O1", "O2", "O3"):
        raise InvalidOptionError(f"cpp.opt_level must be O0..O3, got {parsed.opt_level!r}")
    if parsed.simdlen < 1:
        raise InvalidOptionError(f"cpp.simdlen must be positive, got {parsed.simdlen}")
    if parsed.cpu_backend not in ("cpp", "triton"):
        raise InvalidOptionError(
            f'cpu_backend must be "cpp" or "triton", got {parsed.cpu_backend!r}'
        )
    if parsed.threads is not None and parsed.threads < 1:
        raise InvalidOptionError(f"cpp.threads must be positive, got {parsed.threads}")
    return parsed
