"""A compiled graph: what running it needs (:class:`GraphArtifact`, which the plan cache
stores), and the callable (:class:`CompiledGraph`).

Apart from the compiler (``compile_fx``), so that a process that loads compiled graphs from
the plan cache never imports the lowering, the code generators or sympy (on the H200
machine, without bytecode caches, 2.7 of a warm start's 3.5 s).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .codegen.runtime import bind_kernel
from .cpp_build import load_library

if TYPE_CHECKING:
    from .autotune.cpp_kernels import CppTuning
    from .codegen.triton_module import TritonModule


@dataclass
class GraphArtifact:
    """What running one compiled graph needs, and nothing of how it was made.

    It pickles (the plan cache stores extern ops by name), so a later process
    loads it instead of compiling: :meth:`load` takes the kernels' library
    from the C++ cache (building it only if that entry is gone) and binds the
    wrapper. ``namespace`` holds the wrapper's constants and extern ops.
    """

    cpp_source: str
    opt_level: str
    #: (name, number of pointer parameters, whether it checks indices, number of sizes)
    kernels: tuple[tuple[str, int, bool, int], ...]
    wrapper_source: str
    namespace: dict[str, Any]
    fallbacks: dict[str, str]
    triton: TritonModule | None = None  # the Triton target's kernels (no C++ then)
    cpp_tuning: CppTuning | None = None  # max_autotune: the C++ kernels' variants

    @property
    def num_kernels(self) -> int:
        return len(self.kernels) + (len(self.triton.launches) if self.triton else 0)

    def output_code(self) -> str:
        fallbacks = "\n".join(f"#   {op}: {why}" for op, why in sorted(self.fallbacks.items()))
        header = f"# fallbacks to aten ({len(self.fallbacks)}):\n{fallbacks or '#   none'}\n"
        kernels = (
            f"# ---- Triton kernels ----\n{self.triton.source}"
            if self.triton
            else f"# ---- C++ kernels ----\n{self.cpp_source}"
        )
        if self.cpp_tuning:
            variants = self.cpp_tuning.variant_source()
            kernels += f"\n# ---- their variants (max_autotune) ----\n{variants}"
        return f"{header}\n{kernels}\n# ---- wrapper ----\n{self.wrapper_source}"

    def bind(self, lib: ctypes.CDLL | None, fresh: bool = False) -> CompiledGraph:
        """The callable over ``lib``'s kernels; ``fresh``: generated just now, not loaded from
        the plan cache (its Triton kernels are likely compiled for the first time)."""
        ns = {"torch": torch, **self.namespace}
        if self.triton:
            self.triton.load(ns, fresh)
        for name, num_params, checks_indices, num_sizes in self.kernels:
            ns[name] = bind_kernel(lib, name, num_params, checks_indices, num_sizes)
        if self.cpp_tuning:
            self.cpp_tuning.install(ns)
        exec(compile(self.wrapper_source, "<torchkiln inductor wrapper>", "exec"), ns)
        return CompiledGraph(ns["call"], self)

    def load(self, fresh: bool = False) -> CompiledGraph:
        """The callable: the kernels' library from the C++ cache (built if missing), bound."""
        lib = load_library(self.cpp_source, self.opt_level) if self.kernels else None
        return self.bind(lib, fresh)


class CompiledGraph:
    """The compiled callable: ``compiled(*flat_tensor_args)`` returns the outputs.

    ``call_boxed(args)`` takes the arguments as a list that the wrapper empties, so that
    each input is freed after its last use (the AOT layer calls backwards this way).
    """

    def __init__(self, call, artifact: GraphArtifact):
        self._call = call
        self.artifact = artifact

    def __call__(self, *args: Any) -> Any:
        return self.call_boxed(list(args))

    def call_boxed(self, args: list) -> Any:
        if torch.is_grad_enabled():  # extern aten calls need not record autograd graphs
            with torch.no_grad():
                return self._call(args)
        return self._call(args)

    @property
    def num_kernels(self) -> int:
        return self.artifact.num_kernels

    @property
    def fallbacks(self) -> dict[str, str]:
        return dict(self.artifact.fallbacks)
