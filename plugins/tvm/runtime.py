"""Runs a built Relax module in a ``relax.VirtualMachine``, on torch tensors' own memory.

Inputs go in through DLPack without copies (a copy only for non-contiguous tensors);
the VM allocates each call's outputs, which come back through DLPack as torch tensors
sharing that memory. Outputs that may be an input's or a constant's memory (an input
returned as it is, a reshaped weight) are copied, as are outputs eager lays out with
other strides (a transpose): torch's callers get fresh tensors laid out as eager's.
On CUDA the VM's kernels run on torch's current stream, as the torch kernels it calls
(:mod:`torchkiln_tvm.extern`) and the caller's other work do.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from typing import Any

import torch
import tvm_ffi
from torch._prims_common import is_non_overlapping_and_dense_or_false

import tvm
from torchkiln.exc import KilnError
from torchkiln.index_checks import IndexCheck, check_indices
from torchkiln_tvm import extern  # noqa: F401  (registers the torch kernels a VM may call)
from tvm import relax


def tvm_device(device: torch.device) -> tvm.runtime.Device:
    return tvm.cuda(device.index or 0) if device.type == "cuda" else tvm.cpu()


#: TVM takes only tensors whose data starts on this many bytes' boundary
TVM_ALIGNMENT = 64


class TVMGraph:
    """``graph(*flat_tensors) -> list`` running one built Relax module's ``main``."""

    def __init__(
        self,
        executable: relax.VMExecutable | tvm.runtime.Module,
        device: torch.device,
        values: Sequence[torch.Tensor],
        copies: Collection[int],
        index_checks: tuple[IndexCheck, ...] = (),
    ):
        """``index_checks``: the graph's index inputs to check before it runs (TVM's take
        clamps where eager raises)."""
        #: what the plan cache stores (``torchkiln_tvm.cache``)
        self.executable = executable
        self.device = device
        #: the outputs' layouts, as meta tensors
        self.values = [
            torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") for v in values
        ]
        self.copies = frozenset(copies)
        self.strided = {
            k: tuple(v.stride())
            for k, v in enumerate(values)
            if not v.is_contiguous() and is_non_overlapping_and_dense_or_false(v)
        }
        self._local = threading.local()
        self.index_checks = index_checks
        self.cuda = device.type == "cuda"
        self.tvm_device = tvm_device(device)

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        if self.index_checks:
            check_indices(args, self.index_checks)
        if not self.cuda:
            return self._run(args)
        stream = torch.cuda.current_stream(self.device)
        with tvm_ffi.use_raw_stream(self.tvm_device, stream.cuda_stream):
            return self._run(args)

    def _run(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        tensors = [self._on_device(k, a) for k, a in enumerate(args)]
        main = self.main()
        outputs = [torch.from_dlpack(t) for t in main(*map(tvm.runtime.from_dlpack, tensors))]
        # and those Relax's simplifications made an input as it is (``x * 1.0``), or a
        # reshape of one (the VM's reshape is a view): they start at an input's address
        starts = {t.data_ptr() for t in tensors if t.numel()}
        for k, out in enumerate(outputs):
            if k in self.copies or (out.numel() and out.data_ptr() in starts):
                outputs[k] = out.clone()
        for k, stride in self.strided.items():
            out = outputs[k]
            fresh = torch.empty_strided(out.shape, stride, dtype=out.dtype, device=out.device)
            outputs[k] = fresh.copy_(out)
        return outputs

    def main(self) -> Any:
        """This thread's VM's ``main``: a VM runs one call at a time (its register frames are
        its own; two threads in one VM crashed, ``reg < frame->register_file.size()``)."""
        main = getattr(self._local, "main", None)
        if main is None:
            vm = relax.VirtualMachine(self.executable, tvm_device(self.device))
            main = self._local.main = vm["main"]
        return main

    def _on_device(self, k: int, arg: torch.Tensor) -> torch.Tensor:
        """Input ``k`` contiguous on the graph's device (a 0-dim CPU tensor is moved there)."""
        if arg.device != self.device:
            if arg.dim() != 0 or arg.device.type != "cpu":
                raise KilnError(
                    f"the tvm graph was built for {self.device}; input {k} is on {arg.device}"
                )
            arg = arg.to(self.device)
        arg = arg.detach()
        strides = compact_strides(arg.shape)
        if not arg.numel():  # torch's own strides of an empty tensor are not TVM's
            return torch.empty_strided(arg.shape, strides, dtype=arg.dtype, device=arg.device)
        if arg.stride() != strides or arg.data_ptr() % TVM_ALIGNMENT:  # or a view inside
            arg = arg.clone(memory_format=torch.contiguous_format)
        return arg


def compact_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The row-major strides TVM checks its inputs for: the product of the later sizes, size-1
    and empty dimensions included (torch calls a tensor with other strides there contiguous,
    and its own strides of an empty tensor are not these)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))
