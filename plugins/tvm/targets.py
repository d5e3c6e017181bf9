"""The TVM target a graph is built for, from the ``target`` option or the tensors' device.

``llvm`` is the host CPU with its own ``-mcpu`` (TVM's host detection): without it LLVM
emits baseline x86-64 code, no AVX. ``cuda`` is accepted only when TVM's CUDA runtime
finds a GPU here: the PyPI wheel is built with CUDA, and without a driver a CUDA target
would fail later, at build or run time, with a less clear message.
"""

from __future__ import annotations

import functools
import json

import torch

import tvm
from torchkiln.exc import BackendUnavailable, InvalidOptionError

#: The target kinds the backend runs tensors of each torch device type on.
KINDS = {"cpu": "llvm", "cuda": "cuda"}


@functools.cache
def host() -> tvm.target.Target:
    """``llvm`` for this machine's CPU (its ``-mcpu`` and triple)."""
    return tvm.target.Target.from_device(tvm.cpu())


def resolve(target: str | None, device: torch.device | None) -> tvm.target.Target:
    """The target for ``target`` (``None``: from ``device``), checked against ``device``.

    ``target`` is a kind (``"llvm"``, ``"cuda"``) or TVM's JSON form of a target
    (``'{"kind": "llvm", "mcpu": "skylake"}'``): TVM 0.27 no longer parses ``"llvm -mcpu=..."``.
    """
    spec = _parse(target) if target else {"kind": KINDS.get(device.type if device else "cpu")}
    kind = spec.get("kind")
    if kind not in KINDS.values():
        raise InvalidOptionError(
            f"option 'target' of backend 'tvm': {target or device} is not supported; name "
            "'llvm' (the host CPU), 'cuda', or a target as JSON, e.g. "
            '\'{"kind": "llvm", "mcpu": "skylake"}\''
        )
    if device is not None and KINDS.get(device.type) != kind:
        raise InvalidOptionError(
            f"option 'target' of backend 'tvm' is {target!r}, but the graph's tensors are on "
            f"{device}; leave target unset to build for the tensors' device"
        )
    if kind == "cuda":
        return cuda(spec)
    return host() if spec == {"kind": "llvm"} else tvm.target.Target(spec)


def _parse(target: str) -> dict:
    if not target.lstrip().startswith("{"):
        return {"kind": target}
    try:
        spec = json.loads(target)
    except json.JSONDecodeError as e:
        raise InvalidOptionError(
            f"option 'target' of backend 'tvm': {target!r} is not valid JSON ({e})"
        ) from None
    if not isinstance(spec, dict):
        raise InvalidOptionError(
            f"option 'target' of backend 'tvm': {target!r} is not a JSON object"
        )
    return spec


def cuda(spec: dict) -> tvm.target.Target:
    """A CUDA target, once TVM's CUDA runtime has found a GPU."""
    try:
        found = tvm.cuda(0).exist
    except Exception as e:  # the runtime library can't load (libcudart, libcuda missing)
        found, why = False, f"{type(e).__name__}: {e}"
    else:
        why = "no CUDA GPU is visible to TVM's runtime"
    if not found:
        raise BackendUnavailable(
            f"the tvm backend can't build for CUDA: {why}; run on a machine with a "
            "CUDA driver (the apache-tvm wheel needs libcudart.so.13 and libcuda.so.1), "
            "or leave target unset for the CPU"
        )
    if spec == {"kind": "cuda"}:
        return tvm.target.Target.from_device(tvm.cuda(0))
    return tvm.target.Target(spec)
