"""torch's own kernels for matmuls and convolutions, called from compiled Relax modules.

The apache-tvm wheel has no BLAS (no cblas, MKL, DNNL or cuBLAS): its matmuls and
convolutions are TVM's own loops, about 10x slower than torch's MKL / oneDNN kernels on
CPU (256x1024 @ 1024x1024, one thread: 37 ms against 3.5 ms). With the backend's
``extern_ops`` option (on by default, CPU and CUDA) the converters emit
``R.call_dps_packed`` of the global functions below instead of ``R.matmul`` and
``R.nn.conv*d``. The VM passes the operands and the destination buffer it planned as
DLPack tensors; ``torch.from_dlpack`` views them without copies (Relax tensors are
compact row-major, so the views are contiguous) and torch computes into the destination,
on its own intra-op threads or its current CUDA stream (the VM's too:
:class:`torchkiln_tvm.runtime.TVMGraph`); a convolution (``R.call_pure_packed``) returns torch's
result instead, which the VM takes through DLPack. MetaSchedule never sees these calls:
only TIR kernels are tuning tasks.

A built module names the functions; the VM looks them up when it is created. They are
registered when this module is imported, which :mod:`torchkiln_tvm.runtime` does before it
creates any VM, so that a library loaded from the plan cache in a new process finds them.
"""

from __future__ import annotations

import functools
import json

import torch
import tvm_ffi

#: ``(a, b, transposed, out)``: ``out = a @ b`` (``torch.matmul``: 2-d or batched).
MATMUL = "torchkiln_tvm.matmul"
#: ``(bias, a, b, transposed, beta, alpha, out)``: ``out = beta * bias + alpha * a @ b``.
ADDMM = "torchkiln_tvm.addmm"
#: ``(x, weight[, bias], spec) -> result``: ``spec`` is the JSON of
#: ``[stride, padding, dilation, groups]``. Not destination-passing: torch has no
#: convolution into a given buffer, and copying its result into the VM's cost convnet
#: 3-10% of its time; the result is torch's tensor, handed to the VM through DLPack.
CONVOLUTION = "torchkiln_tvm.convolution"

#: Bits of a matmul's ``transposed``: the operand given is the transpose of the one
#: multiplied (its last two dims swapped), so a transposed weight is read where it lies
#: (torch's BLAS call takes the transpose) instead of being copied by a Relax transpose.
TRANSPOSED_A, TRANSPOSED_B = 1, 2


def _operand(tensor, transposed: int) -> torch.Tensor:
    view = torch.from_dlpack(tensor)
    return view.mT if transposed else view


def matmul(a, b, transposed: int, out) -> None:
    torch.matmul(
        _operand(a, transposed & TRANSPOSED_A),
        _operand(b, transposed & TRANSPOSED_B),
        out=torch.from_dlpack(out),
    )


def addmm(bias, a, b, transposed: int, beta: float, alpha: float, out) -> None:
    torch.addmm(
        torch.from_dlpack(bias),
        _operand(a, transposed & TRANSPOSED_A),
        _operand(b, transposed & TRANSPOSED_B),
        beta=beta,
        alpha=alpha,
        out=torch.from_dlpack(out),
    )


@functools.cache
def _convolution_spec(spec: str) -> tuple:
    """``spec`` parsed once: every call of a built graph passes the same string."""
    stride, padding, dilation, groups = json.loads(spec)
    return stride, padding, dilation, groups


def convolution(x, weight, *rest):
    *bias, spec = rest
    stride, padding, dilation, groups = _convolution_spec(spec)
    result = torch.convolution(
        torch.from_dlpack(x),
        torch.from_dlpack(weight),
        torch.from_dlpack(bias[0]) if bias else None,
        stride,
        padding,
        dilation,
        False,
        [0] * len(stride),
        groups,
    )
    return tvm_ffi.from_dlpack(result.contiguous())


for _name, _fn in ((MATMUL, matmul), (ADDMM, addmm), (CONVOLUTION, convolution)):
    tvm_ffi.register_global_func(_name, _fn, override=True)
