"""What a target device's code generator can do, as lowering and scheduling ask it.

In: a ``torch.device`` (:func:`device_caps`). Out: a :class:`DeviceCaps`,
the one place lowering looks up a target's abilities and preferences (which
dtypes and ``ops.*`` math its generator emits, which aten ops run as library
calls, layout and reduction-splitting choices), so no stage before code
generation imports a generator. CPU tensors get :data:`CPP` (C++/OpenMP,
:mod:`.codegen.cpp`), CUDA tensors :data:`TRITON` (:mod:`.codegen.triton`), and so do
CPU tensors with the inductor option ``cpu_backend="triton"`` (Triton's interpreter,
``TRITON_INTERPRET=1``, runs the kernels); another device is refused with an error
that says what to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchkiln.exc import NotImplementedYet

from .math_ops import MATH_OPS

aten = torch.ops.aten

#: the largest inner extent a Triton reduction keeps in one block, whole rows in registers
#: (larger: a loop over blocks)
TRITON_PERSISTENT_MAX = 4096


@dataclass(frozen=True)
class DeviceCaps:
    """A code generator's abilities; lowering sends what it lacks to aten calls."""

    name: str  # the code generator: "cpp"
    dtypes: frozenset[torch.dtype]  # storage dtypes its kernels read and write
    ops: frozenset[str]  # the ``ops.*`` math it emits (see :data:`.math_ops.MATH_OPS`)
    extern_ops: frozenset  # aten ops always run as library calls (their epilogues fuse)
    channels_last_conv: bool  # 2-D convolutions run on channels-last tensors
    # a reduction of everything this large runs as ``split_chunks`` parallel partial reductions
    split_reduction_min: int
    split_chunks: int
    # largest per-thread array a kernel keeps for values re-read within one outer iteration
    max_local_bytes: int
    # kernels that share no buffer fuse when their loops match (saves loop overhead on a CPU;
    # on a GPU it serializes them: a program then runs both kernels' work)
    independent_fusion: bool = True
    # a pointwise value a matmul reads is stored in the order it reads its own input (a
    # transpose then costs neither side a strided access: the matmul takes any strides)
    store_in_read_order: bool = False
    # a reduction into few outputs (a bias gradient: 768 sums over 8192 rows) runs as
    # parallel partial reductions over chunks of its rows, then reduces the chunks
    split_partial_reductions: bool = False
    random: bool = True  # emits rand/randn (else random ops run as aten calls)
    scatter: bool = True  # emits scatters (index_put, scatter_add...; else aten calls)
    # storage dtypes an accumulating scatter adds into (None: all of ``dtypes``)
    scatter_add_dtypes: frozenset[torch.dtype] | None = None
    # a convolution's weight that is a graph input (a parameter) goes to the library in its
    # own layout, which converts it itself (in C++) rather than through a copy kernel
    # launched from the wrapper (Python): where launches, not kernels, bound the step
    library_converts_input_weights: bool = False

    def supports_dtype(self, dtype: torch.dtype) -> bool:
        return dtype in self.dtypes

    def has_op(self, name: str) -> bool:
        return name in self.ops

    def supports_scatter_add(self, dtype: torch.dtype) -> bool:
        return self.scatter_add_dtypes is None or dtype in self.scatter_add_dtypes


#: matmuls and convolutions: oneDNN / BLAS through aten
_LIBRARY_OPS = frozenset(
    {
        aten.mm.default,
        aten.bmm.default,
        aten.addmm.default,
        aten.baddbmm.default,
        aten.convolution.default,
        aten.convolution_backward.default,
        aten._convolution.default,
    }
)

CPP = DeviceCaps(
    name="cpp",
    dtypes=frozenset(
        {
            torch.float32,
            torch.float64,
            torch.float16,
            torch.bfloat16,
            torch.int8,
            torch.uint8,
            torch.int16,
            torch.int32,
            torch.int64,
            torch.bool,
        }
    ),
    ops=MATH_OPS,
    extern_ops=_LIBRARY_OPS,
    # oneDNN's NCHW path reorders the input and weight into a blocked layout on every call
    # (~25% of a small ResNet's step on one thread); its backward too (up to 1.8x faster
    # channels-last at 16 channels)
    channels_last_conv=True,
    split_reduction_min=1 << 16,
    split_chunks=64,
    max_local_bytes=64 * 1024,  # they live on the stack
)


TRITON = DeviceCaps(
    name="triton",
    dtypes=frozenset(
        {torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool}
    ),
    ops=MATH_OPS,  # core ``tl`` and libdevice (codegen/triton_libdevice.py)
    extern_ops=_LIBRARY_OPS,
    # cuDNN's fast bf16/fp16 kernels are NHWC: an NCHW graph pays a transpose kernel on each
    # side of every convolution (ConvNet on the H100: inference 1.28x -> 1.86x eager; a
    # training step 25.0 -> 19.7 ms once batch norm statistics split into chunks, without
    # which each channel's program walked its rows with a stride of the channel count)
    channels_last_conv=True,
    split_reduction_min=1 << 16,
    # a GPU needs many programs in flight: each chunk is one (132 SMs on an H100)
    split_chunks=1024,
    independent_fusion=False,
    # ResNet-18 training on the H200: 40 weight copies a step, from Python, in a step that
    # the host's launches bound (16.6 ms; its kernels ran 10.3 ms)
    library_converts_input_weights=True,
    store_in_read_order=True,
    split_partial_reductions=True,
    # a value re-read by a later loop of a kernel stays in registers where both loops are
    # persistent (whole rows in one block, 8 bytes per element as plan_kernel counts them;
    # the scheduler fuses only reads at the index a value is stored at, the lane that
    # holds it); longer rows are written to memory and read back
    max_local_bytes=TRITON_PERSISTENT_MAX * 8,
    # accumulating scatters are `tl.atomic_add`s (indices may repeat): none of bool (1-bit),
    # nor of bfloat16 (the interpreter has none; Triton's needs sm_90)
    scatter_add_dtypes=frozenset({torch.float32, torch.float16, torch.int32, torch.int64}),
)


def device_caps(device: torch.device, cpu_backend: str = "cpp") -> DeviceCaps:
    """The capabilities of the code generator for tensors on ``device`` (``cpu_backend``:
    the inductor option choosing C++ or Triton, run by its interpreter, for CPU tensors)."""
    if device.type == "cpu":
        return TRITON if cpu_backend == "triton" else CPP
    if device.type == "cuda":
        return TRITON
    raise NotImplementedYet(
        f"the inductor backend generates code for CPU and CUDA tensors only; got a "
        f"{device.type} tensor (use backend='aot_eager' for it)"
    )
