"""``torchkiln.compile(DDP(model))``: DDP's forward runs eagerly, the module it wraps compiled.

DDP's ``forward`` is Python bookkeeping around ``self.module(...)``: buffer broadcasts,
``reducer.prepare_for_forward``/``prepare_for_backward``, ``no_sync``, static-graph and
unused-parameter tracking, all on process-group objects a graph cannot hold. Like
torch.compile, only the inner module is compiled; DDP calls it in place of its module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from torchkiln.compiled_module import CompiledModule


def is_ddp(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a ``DistributedDataParallel`` wrapper."""
    return isinstance(module, DistributedDataParallel)


class CompiledDDP(CompiledModule):
    """A DDP module whose inner module runs compiled; everything else is the DDP module's.

    Each call puts the compiled inner module in DDP's ``module`` slot for the length of
    the call, so ``ddp.module`` stays the user's module outside it (``state_dict`` keys,
    ``isinstance``, attribute writes). Calls of one DDP module from several threads at
    once are not supported, as DDP's reducer does not support them either.
    """

    _own_slots = CompiledModule._own_slots | {"_inner"}

    def __init__(self, mod: torch.nn.Module, compile_forward: Callable[[Callable], Callable]):
        object.__setattr__(self, "_orig_mod", mod)
        object.__setattr__(self, "_compile_forward", compile_forward)
        object.__setattr__(self, "_inner", CompiledModule(mod.module, compile_forward))
        object.__setattr__(self, "_compiled_call", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._with_inner_compiled(self._orig_mod, args, kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._with_inner_compiled(self._orig_mod.forward, args, kwargs)

    def _with_inner_compiled(self, run: Callable, args: tuple, kwargs: dict[str, Any]) -> Any:
        ddp = self._orig_mod
        inner = ddp._modules["module"]
        if inner is not self._inner._orig_mod:  # the user gave DDP another module
            object.__setattr__(self, "_inner", CompiledModule(inner, self._compile_forward))
        ddp._modules["module"] = self._inner
        try:
            return run(*args, **kwargs)
        finally:
            ddp._modules["module"] = inner
