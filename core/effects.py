"""Calls made for what they do, not for a value: they stay in every graph, where they were.

A call whose result nothing reads is dead code unless it has an effect. fx counts some
calls impure (``Node.is_impure``: a schema that writes its arguments, ops torch registers
as ordered effects such as ``aten._print``, a list of assertions), and misses others: an op
whose schema returns nothing (``aten._assert_async.default``, what ``torch._assert_async``
runs) has no reason to be called but its effect. Capture records such calls as nodes, and
every pass that removes dead code (the AOT layer's, the partitioner's, a backend's) keeps
them: dropped, a user's assertion would not raise and a custom op's write would be lost.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx


def overload(target: Any) -> Any:
    """The op a torch callable runs: a ``torch.library.custom_op``'s overload, an overload
    packet's ``default``, else ``target`` itself."""
    target = getattr(target, "_opoverload", target)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return getattr(target, "default", target)
    return target


def has_side_effects(target: Any) -> bool:
    """Whether a call of ``target`` has an effect beyond its result."""
    op = overload(target)
    if torch._library.utils.is_impure(op, impure_random=False):
        return True
    schema = getattr(op, "_schema", None)
    return schema is not None and not schema.returns


def writes_arguments(target: Any) -> bool:
    """Whether ``target``'s schema writes one of its arguments."""
    schema = getattr(overload(target), "_schema", None)
    return schema is not None and schema.is_mutable


def is_impure(node: fx.Node) -> bool:
    """``Node.is_impure``, and calls of ops that return nothing: for
    ``Graph.eliminate_dead_code(is_impure_node=...)``."""
    if node.op == "call_function" and has_side_effects(node.target):
        return True
    return node.is_impure()


def is_effect(node: fx.Node) -> bool:
    """A call nothing reads, kept for its effect."""
    return node.op == "call_function" and not node.users and is_impure(node)
