"""libdevice for the generated Triton kernels, whichever Triton runs them.

The math core ``tl`` lacks (log1p, erfinv, lgamma, atan2, an exact pow...) comes from
CUDA's libdevice. Its import path moved between Triton versions:
``triton.language.extra.libdevice`` (backend-dispatching stubs: Triton 3.6 on the GPU
machine, 3.9 from pip) else ``triton.language.extra.cuda.libdevice`` (older 3.x). This
is the one place that knows; generated modules bind theirs as :func:`libdevice_binding` says.

Triton's interpreter (``TRITON_INTERPRET=1``, how CI runs the generator on CPU tensors)
cannot call external functions, so there the same names are computed by torch on the
interpreter's numpy arrays: the kernels' text is the GPU's, libdevice's own numerics are
what the GPU check covers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

#: libdevice function -> torch function of the same math (what the interpreter runs)
TORCH_EQUIVALENTS: dict[str, Callable[..., torch.Tensor]] = {
    "acos": torch.acos,
    "acosh": torch.acosh,
    "asin": torch.asin,
    "asinh": torch.asinh,
    "atan": torch.atan,
    "atan2": torch.atan2,
    "atanh": torch.atanh,
    "copysign": torch.copysign,
    "cosh": torch.cosh,
    "erfc": torch.erfc,
    "erfinv": torch.erfinv,
    "expm1": torch.expm1,
    "fmod": torch.fmod,
    "hypot": torch.hypot,
    "lgamma": torch.lgamma,
    "log10": torch.log10,
    "log1p": torch.log1p,
    "pow": torch.pow,
    "sinh": torch.sinh,
    "tan": torch.tan,
    "tanh": torch.tanh,
}


class InterpretedLibdevice:
    """libdevice's functions (those of :data:`TORCH_EQUIVALENTS`) on interpreter tensors."""

    def __getattr__(self, name: str) -> Callable:
        if name not in TORCH_EQUIVALENTS:
            raise AttributeError(
                f"libdevice.{name} has no interpreter equivalent: add it to "
                "triton_libdevice.TORCH_EQUIVALENTS"
            )
        fn = TORCH_EQUIVALENTS[name]

        def call(*args):
            import triton.language as tl
            from triton.runtime.interpreter import TensorHandle

            tensors = [a for a in args if isinstance(a, tl.tensor)]
            data = [
                torch.from_numpy(a.handle.data) if isinstance(a, tl.tensor) else a for a in args
            ]
            out = fn(*data).numpy()
            scalar = tensors[0].dtype
            if not any(a.type.is_block() for a in tensors):  # scalars (held as shape [1])
                return tl.tensor(TensorHandle(out, scalar), scalar)
            return tl.tensor(TensorHandle(out, scalar), tl.block_type(scalar, list(out.shape)))

        call.__name__ = name
        return call


def libdevice_binding(interpreted: bool) -> str:
    """The lines of a generated module that bind ``libdevice``: Triton's, found where this
    Triton keeps it (so that compile workers load the module with Triton alone, no torch),
    or under its interpreter the torch equivalents."""
    if interpreted:
        return (
            "from torchkiln_inductor.codegen.triton_libdevice import InterpretedLibdevice\n\n"
            "libdevice = InterpretedLibdevice()"
        )
    try:
        from triton.language.extra import libdevice  # noqa: F401
    except ImportError:  # Triton before 3.2
        return "from triton.language.extra.cuda import libdevice"
    return "from triton.language.extra import libdevice"
