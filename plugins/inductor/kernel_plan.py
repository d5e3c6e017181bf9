"""How one fused kernel runs, device-neutral: what every code generator reads.

In: a :class:`~.scheduler.FusedKernel` (its nodes, its outer loops and each
node's inner loops), the buffers the schedule keeps inside kernels, and the
device's :class:`~.device.DeviceCaps`. Out: a :class:`KernelPlan`:

* **segments**: consecutive nodes over the same inner loops share one loop
  nest; a node that reads a reduction computed in the kernel starts a new one
  (the reduction must be complete). Each reduction node accumulates over its
  segment's inner loops (the ``reduction`` op of its body says how).
* **inputs** (buffers the kernel reads that other steps write), **stored**
  (buffers it writes to memory) and **local** (buffers only this kernel reads,
  re-read by a later segment of the same outer iteration: per-thread scratch of
  one outer iteration's elements instead of memory, up to the device's
  ``max_local_bytes``).
* each node's body (:class:`~.loop_body.LoopBody`) in the kernel's loop
  variables, ``o*`` over the outer loops and ``i*`` over the segment's inner ones
  (:meth:`KernelPlan.body`).

:func:`merge_loops` collapses adjacent loops wherever every index stays affine
(fewer, longer loops; the generator decides where to use it). A generator
(:mod:`.codegen.cpp` today) turns a plan into source; the wrapper allocates the
``stored`` buffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .device import DeviceCaps
from .indexing import Expr, FloorDiv, Mod, Var, unflatten
from .loop_body import LoopBody
from .scheduler import INNER, OUTER, FusedKernel, SchedulerNode, kernel_vars
from .sizes import all_static, as_size


@dataclass
class Segment:
    """Nodes that run one after the other inside one nest of ``inner`` loops."""

    inner: tuple[int, ...]
    nodes: list[SchedulerNode] = field(default_factory=list)


@dataclass
class KernelPlan:
    kernel: FusedKernel
    segments: list[Segment]
    inputs: list[str]  # buffers read from memory that other steps write (or the graph's inputs)
    stored: set[str]  # buffers this kernel writes to memory
    # internal buffers re-read by later loops of the same outer iteration: a per-thread
    # array of one outer iteration's elements instead of memory (name -> inner sizes)
    local: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def body(self, node: SchedulerNode) -> LoopBody:
        """``node``'s ops in the kernel's loop variables ``o*`` and ``i*``."""
        inner = self.kernel.inner_of(node)
        return node.body_at(kernel_vars(OUTER, self.kernel.outer), kernel_vars(INNER, inner))

    def describe(self) -> str:
        """The plan and its bodies, for trace folders."""
        lines = [f"{self.kernel.name}: outer {list(self.kernel.outer)}"]
        for seg in self.segments:
            lines.append(f"  inner {list(seg.inner)}:")
            for node in seg.nodes:
                lines.append(f"    {node!r}")
                lines += ["        " + line for line in self.body(node).lines()]
        local = [f"{name} {list(sizes)}" for name, sizes in self.local.items()]
        lines.append(f"  reads {', '.join(self.inputs) or '-'}")
        lines.append(f"  stores {', '.join(sorted(self.stored)) or '-'}")
        lines.append(f"  local {', '.join(local) or '-'}")
        return "\n".join(lines)


def plan_kernel(kernel: FusedKernel, internal: set[str], caps: DeviceCaps) -> KernelPlan:
    """Segments, inputs, stored and local buffers of ``kernel`` (``internal``: buffers no
    other step reads and no graph output is)."""
    segments: list[Segment] = []
    where: dict[str, int] = {}
    for node in kernel.nodes:
        inner = kernel.inner_of(node)
        reads = node.read_names()
        cur = segments[-1] if segments else None
        joins = (
            cur is not None
            and cur.inner == inner
            and not any(n.is_reduction and n.name in reads for n in cur.nodes)
        )
        if not joins:
            segments.append(Segment(inner))
        segments[-1].nodes.append(node)
        where[node.name] = len(segments) - 1
    produced = kernel.names()
    inputs = sorted({name for n in kernel.nodes for name in n.read_names()} - produced)
    stored, local = set(), {}
    for node in kernel.nodes:
        if node.is_scatter:
            continue
        if node.name not in internal:
            stored.add(node.name)
            continue
        if node.is_reduction:
            continue
        readers = [n for n in kernel.nodes if node.name in n.read_names()]
        if all(where[r.name] == where[node.name] for r in readers):
            continue
        inner = kernel.inner_of(node)
        nbytes = math.prod(inner) * 8 if all_static(inner) else 0  # a symbolic one won't do
        fits = 0 < nbytes <= caps.max_local_bytes
        if all(kernel.inner_of(r) == inner for r in readers) and fits:
            local[node.name] = inner
        else:
            stored.add(node.name)
    return KernelPlan(kernel, segments, inputs, stored, local)


def node_indices(
    nodes: list[SchedulerNode], outer_vars: list[Expr], inner_vars: list[Expr]
) -> list[Expr]:
    """The store and load indices of ``nodes`` in the given loop variables."""
    out: list[Expr] = []
    for node in nodes:
        body = node.body_at(outer_vars, inner_vars)
        out += [body.store.args[1], *(index for _, index in body.loads())]
    return out


def merge_loops(
    sizes: tuple[int, ...], prefix: str, indices: Callable[[list[Expr]], list[Expr]]
) -> tuple[tuple[int, ...], list[Expr]]:
    """Merge adjacent loops wherever every index stays affine (no div/mod) after merging.

    A [8, 16, 32, 32] elementwise kernel that reads per-channel values runs as
    [8, 16, 1024]: longer loops, the same indices. ``indices`` maps candidate
    loop variables (one expression per loop of ``sizes``) to the index
    expressions the nodes would use. Returns the merged sizes and, per loop of
    ``sizes``, its index in the merged loops' variables ``<prefix>0, <prefix>1...``.
    """
    groups = [[s] for s in sizes]
    i = len(groups) - 2
    while i >= 0:
        trial = [*groups[:i], groups[i] + groups[i + 1], *groups[i + 2 :]]
        names = {f"{prefix}{k}" for k in range(len(trial))}
        if not any(_has_divmod(e, names) for e in indices(_expanded_vars(trial, prefix))):
            groups = trial
        i -= 1
    return tuple(as_size(math.prod(g)) for g in groups), _expanded_vars(groups, prefix)


def _expanded_vars(groups: list[list[int]], prefix: str) -> list[Expr]:
    """Loop variable ``<prefix><k>`` per group, split back into one index per original loop."""
    out: list[Expr] = []
    for k, group in enumerate(groups):
        merged = Expr.of(Var(f"{prefix}{k}", as_size(math.prod(group))))
        out += unflatten(merged, group) if len(group) > 1 else [merged]
    return out


def _has_divmod(expr: Expr, names: set[str]) -> bool:
    for atom, _ in expr.terms:
        if isinstance(atom, (FloorDiv, Mod)) and any(v.name in names for v in atom.arg.free_vars()):
            return True
    return False
