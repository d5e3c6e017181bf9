"""How capture treats ``torch.distributed`` calls in user code.

Functional collectives (``torch.distributed._functional_collectives``) return new tensors:
they are traced like any torch function. Everything else acts on a process group outside
the graph (``dist.all_reduce(t)`` writes ``t`` in place and returns None, so a graph node
for it would be dead code and vanish): it breaks the graph and runs eagerly. Rank and
world size are read at capture time and guarded, as the graph is specialized on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture.variables.base import VariableTracker
from torchkiln.capture.variables.constants import ConstantVariable
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

FUNCTIONAL_MODULES = ("torch.distributed._functional_collectives",)

#: Queries answered at capture time (no arguments: the default group), guarded.
STATE_QUERIES = (
    {
        torch.distributed.is_available,  # how torch was built: the guard is never false
        torch.distributed.get_rank,
        torch.distributed.get_world_size,
        torch.distributed.is_initialized,
    }
    if torch.distributed.is_available()
    else {torch.distributed.is_available}
)


def is_distributed(fn: Any) -> bool:
    """Whether ``fn`` comes from ``torch.distributed``."""
    module = getattr(fn, "__module__", "") or ""
    return module == "torch.distributed" or module.startswith("torch.distributed.")


def is_state_query(fn: Any, args: list, kwargs: dict) -> bool:
    """``dist.is_available()``, ``dist.get_rank()``, ``dist.get_world_size()``,
    ``dist.is_initialized()``."""
    return fn in STATE_QUERIES and not args and not kwargs


def group_names(tx: Translator, args: list, kwargs: dict) -> tuple[list, dict]:
    """A functional collective's arguments with each process group given by its name.

    A ``ProcessGroup`` object cannot be a graph constant; its name can, and functional
    collectives accept it. The group object is guarded by identity: another group, another
    graph.
    """

    def named(arg: VariableTracker) -> VariableTracker:
        group = getattr(arg, "value", None)
        if not isinstance(group, torch.distributed.ProcessGroup):
            return arg
        if arg.source is None:
            raise Unsupported(
                "a functional collective over a process group that capture cannot guard "
                "(made in the compiled function, or read through a property such as "
                "dist.group.WORLD); pass the group in as an argument or a global"
            )
        tx.output.guards.identity(arg.source, group)
        return ConstantVariable(group.group_name)

    return [named(a) for a in args], {k: named(v) for k, v in kwargs.items()}


def refusal(fn: Any) -> str | None:
    """Why a ``torch.distributed`` callable is not traced, or None if it is."""
    module = getattr(fn, "__module__", "") or ""
    if module.startswith(FUNCTIONAL_MODULES):
        return None
    name = getattr(fn, "__name__", repr(fn))
    return (
        f"{module}.{name} acts on a process group outside the graph (in-place collectives "
        "return nothing the graph could keep): it runs eagerly between graphs; use "
        f"torch.distributed._functional_collectives.{name} to keep a collective in the graph"
    )
