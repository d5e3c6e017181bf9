"""Inputs that share memory, when the graph mutates an input.

A graph that writes into an input is only right for the aliasing it was
captured with: ``f(x, y)`` with ``x.add_(1)`` reads ``y`` before or after the
write depending on whether ``y`` is a view of ``x``. So such a graph is
guarded by **storage**, not identity: which argument tensors share a storage
(``alias_pattern``), and, within a shared storage, at which offset each one
starts (sizes and strides are guarded per tensor already).

Backends (the AOT layer's functionalization first) see one graph input per
storage: the aliased inputs of a group are replaced by one *synthetic base*
(``alias_base``: the whole storage as a 1-D tensor) and each alias is
rebuilt inside the graph with ``as_strided``, so a write through one alias
is seen through every other, as in eager.

An input that ``as_strided`` addresses at an explicit storage offset is
passed as a synthetic base too, mutated or not: graphs are traced, and
backends compile, with inputs that start at their storage's beginning; the
base does, where the input itself may start anywhere.

Python objects from outside (lists, dicts, sets, user objects, modules) have
the same problem when the frame mutates one: ``guard_distinct_objects``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from torchkiln.capture.guards import COST_TENSOR, COST_VALUE
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.output_graph import OutputGraph


def alias_pattern(*tensors: torch.Tensor) -> tuple[int, ...]:
    """For each tensor, the index of its storage in order of first appearance: (0, 1, 0)."""
    seen: dict[int, int] = {}
    return tuple(seen.setdefault(storage_id(t), len(seen)) for t in tensors)


def alias_base(t: torch.Tensor) -> torch.Tensor:
    """The whole storage of ``t`` as a 1-D tensor of ``t``'s dtype (a synthetic base)."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage())


def storage_id(t: torch.Tensor) -> int:
    """An id of ``t``'s storage (of a fake tensor: of its fake storage)."""
    return t.untyped_storage()._cdata


def is_argument(source: str) -> bool:
    """Tensors the caller passes, not a module's own parameters and buffers (those keep
    their identity from call to call; guarding them would cost a check per weight)."""
    return "._parameters[" not in source and "._buffers[" not in source


def is_weight(source: str, value: torch.Tensor) -> bool:
    """A parameter or a module's buffer, marked ``meta["weight"]`` on its placeholder: a
    backend may fold it into what it compiles, guarding that it stays the same tensor."""
    return isinstance(value, torch.nn.Parameter) or not is_argument(source)


def guard_and_merge_aliases(output: OutputGraph) -> None:
    """If the graph mutates an input or reads one's storage (``output.storage_reads``):
    guard the storage aliasing of the argument tensors and replace each group of aliased
    inputs, and each input whose storage is read, by a synthetic base."""
    if not output.mutates_inputs and not output.storage_reads:
        return
    arguments = [(s, v, n) for s, v, n in output.inputs if is_argument(s)]
    if not arguments:
        return
    guards = output.guards
    pattern = alias_pattern(*(value for _, value, _ in arguments))
    if len(arguments) > 1:
        sources = ", ".join(source for source, _, _ in arguments)
        fn = guards.bind(alias_pattern, "alias_pattern")
        guards.add(
            f"{fn}({sources}) == {pattern!r}",
            COST_TENSOR,
            f"storages shared by {sources} follow the pattern {pattern}",
        )
    groups: dict[int, list] = {}
    for group, item in zip(pattern, arguments):
        groups.setdefault(group, []).append(item)
    for members in groups.values():
        node = members[0][2]
        if len(members) > 1 or storage_id(node.meta["example_value"]) in output.storage_reads:
            _merge(output, members)


def _merge(output: OutputGraph, members: list) -> None:
    names = ", ".join(source for source, _, _ in members)
    first = members[0][1]
    if any(value.requires_grad for _, value, _ in members):
        raise Unsupported(f"inputs {names} share memory, one is mutated and one requires grad")
    if any(value.dtype != first.dtype for _, value, _ in members):
        raise Unsupported(f"inputs {names} share memory with different dtypes and one is mutated")
    for source, value, _ in members:
        output.guards.add(
            f"{source}.storage_offset() == {value.storage_offset()}",
            COST_TENSOR,
            f"{source} starts at offset {value.storage_offset()} of its storage",
        )
        # each alias is rebuilt with these very sizes and strides: a dimension made dynamic
        # (automatic dynamic, dynamic=True) must not let other sizes through
        output.guards.exact_layout(source, value)
    make_base = output.guards.bind(alias_base, "alias_base")
    base = output.add_input(alias_base(first), f"{make_base}({members[0][0]})")
    graph = output.graph
    last_placeholder = [n for n in graph.nodes if n.op == "placeholder"][-1]
    with graph.inserting_after(last_placeholder):
        for _, value, node in reversed(members):
            view = graph.call_function(
                torch.as_strided,
                (base.node, tuple(value.shape), tuple(value.stride()), value.storage_offset()),
            )
            view.meta["example_value"] = node.meta["example_value"]
            node.replace_all_uses_with(view)
            graph.erase_node(node)
    merged = {node for _, _, node in members}
    output.inputs = [item for item in output.inputs if item[2] not in merged]


#: Side-effect events that change an object from outside (not a cell or global binding).
_OBJECT_EVENTS = ("container", "attr", "delattr")


def guard_distinct_objects(output: OutputGraph) -> None:
    """If the frame mutates objects from outside: guard that the objects it read through
    different sources, among those of a mutated object's type, are still distinct.

    One object read through two sources has one tracker (``OutputGraph.wrap`` guards
    ``b is a``). Objects that were distinct at capture have a tracker each, each
    mirroring its own object: where a later call passes one object for both, a write
    through one is not seen by reads through the other (``a.append(1); len(b)``), and
    the write-backs of both overwrite each other. So an entry whose frame mutates an
    object holds only while no two of those trackers are one object.

    Only a mutated object can make the difference, and it can only be one object with
    another of its exact type: every tracker's source has its type (or identity)
    guarded. Hence one guard per type that the frame mutates an object of, over the
    objects of that type it read: ``a is not b`` for two, ``len({id(a), id(b), id(c)})
    == 3`` for more. Requiring the unmutated ones of that type distinct too is stronger
    than needed, but one check per type; where they are one object the recompile
    shares their tracker. A frame that mutates nothing gets no guard. Tensors are
    guarded by storage (``guard_and_merge_aliases``).
    """
    mutated = {
        event[1].source for event in output.side_effects.events if event[0] in _OBJECT_EVENTS
    }
    if not mutated:
        return
    by_type: dict[type, list[str]] = {}
    for source, value in output.objects_read():
        if not isinstance(value, torch.Tensor):
            by_type.setdefault(type(value), []).append(source)
    for sources in by_type.values():
        if len(sources) < 2 or mutated.isdisjoint(sources):
            continue
        if len(sources) == 2:
            expr = f"{sources[0]} is not {sources[1]}"
            output.guards.add(expr, COST_VALUE, f"{expr} (the frame mutates one)")
            continue
        ids = ", ".join(f"id({source})" for source in sources)
        output.guards.add(
            f"len({{{ids}}}) == {len(sources)}",
            COST_VALUE,
            f"{', '.join(sources)} are distinct objects (the frame mutates one)",
        )
