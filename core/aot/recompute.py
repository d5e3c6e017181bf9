"""What the min-cut partitioner may recompute in backward, and what saving a value costs.

Cheap to recompute: pointwise ops, views, dtype conversions, ``getitem`` of a
multi-output node, constants, ops that create a tensor from no tensor (``full``)
and reductions over at most ``SMALL_REDUCTION_NUMEL`` elements. Never
recomputed: random ops (their result would differ from the forward's) and
everything else (matmuls, convolutions, large reductions, gathers...).
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

#: Largest input (in elements) of a reduction the backward may recompute.
SMALL_REDUCTION_NUMEL = 4096

#: The size a cost assumes for a data-dependent size (one with no value at trace time).
UNKNOWN_SIZE_GUESS = 8192


def size_hint(n: int | torch.SymInt) -> int:
    """``n`` as an int; a symbolic size as its value at trace time (its hint). Costs and
    thresholds read sizes through this: comparing SymInts would add guards on the sizes
    for a choice that any size may take."""
    if isinstance(n, torch.SymInt):
        hint = n.node.hint
        return int(hint) if hint is not None else UNKNOWN_SIZE_GUESS
    return n


_REDUCTION = getattr(torch.Tag, "reduction", None)


def _tensor_inputs(node: fx.Node) -> list[torch.Tensor]:
    vals = (n.meta.get("val") for n in node.all_input_nodes)
    return [v for v in vals if isinstance(v, torch.Tensor)]


def is_recomputable(node: fx.Node) -> bool:
    """Whether backward may recompute ``node`` instead of having it saved."""
    if node.op == "get_attr":
        return True  # a constant of the graph module
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in op.tags:
        return False
    if torch.Tag.pointwise in op.tags or op.is_view:
        return True
    inputs = _tensor_inputs(node)
    if op is torch.ops.aten._to_copy.default:
        # a dtype conversion is pointwise (a mixed-precision graph's upcasts: saving the
        # float32 copy would cost twice the bfloat16 value it is made from); a copy to
        # another device is a transfer
        device = node.kwargs.get("device")
        return device is None or all(_same_device(t.device, device) for t in inputs)
    if not inputs:
        return True
    if _REDUCTION is not None and _REDUCTION in op.tags:
        return max(size_hint(t.numel()) for t in inputs) <= SMALL_REDUCTION_NUMEL
    return False


def _same_device(device: torch.device, target: object) -> bool:
    target = torch.device(target)
    return device.type == target.type and target.index in (None, device.index)


def saved_bytes(node: fx.Node) -> int | None:
    """Capacity of the node's edge in the flow network: bytes to keep it alive.

    A tensor costs its bytes plus one (so that among equal sizes fewer
    tensors win); a primal costs its bytes alone, because the caller holds
    it anyway. A scalar costs one; a tuple cannot be saved whole (None).
    """
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        nbytes = size_hint(val.numel()) * val.element_size()
        return nbytes if node.op == "placeholder" else nbytes + 1
    if isinstance(val, (tuple, list)):
        return None
    return 1
