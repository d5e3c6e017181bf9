"""The fusion scheduler: IR buffers in, an ordered list of fused kernels and extern calls out.

Every computed buffer starts as its own kernel. A kernel has *outer* loops
(shared by all its nodes; the code generator parallelises them) and, per
node, *inner* loops (a reduction's reduced dimensions, or the trailing
dimensions of a pointwise node that joined a reduction's row loop). Two
kernels may fuse when

* their nodes split into the same outer sizes (reductions fix theirs; a
  pointwise node's loop may split in two, so that a (32, 32) output joins the
  loop over its (2, 16) rows of statistics),
* every value one reads from the other is read exactly where, in the same
  outer iteration, it was written (so parallel outer iterations never
  depend on each other and results never change),
* fusing does not create a cycle through a third kernel,
* a pointwise node's loop splits only to join a reduction's rows (each outer
  iteration walks its rows alone: one program each, on a GPU).

Kernels that share nothing fuse too when they run over the same loops (one
pass of loop overhead on a CPU), unless ``independent_fusion`` is off (on a
GPU their programs would run one after the other in one kernel instead of
side by side).

Candidates are ranked by the bytes of memory traffic they save (buffers
written by one and read by the other, or read by both) and fused greedily,
best first, until nothing changes. Accesses are read off each node's
recorded ops list (:class:`~.loop_body.LoopBody`) with the kernel's loop
variables put in. :mod:`.kernel_plan` and the code generators receive
:class:`FusedKernel` objects and never re-check legality.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from .indexing import Expr, Var, make_vars
from .ir import ComputedBuffer, ExternKernel, GraphIR, Reduction, Scatter
from .loop_body import LoopBody
from .sizes import as_size, divides, exact_quotient, hint, symbols_in

#: elements of the largest loop that independent kernels fuse over where the device has no
#: independent fusion (one program of a GPU kernel covers it: fusing costs no parallelism)
TINY_LOOP = 1024

#: loop variables of a kernel: o0, o1... over its outer (parallel) loops, i0, i1... over a
#: node's inner loops
OUTER, INNER = "o", "i"


def _nontrivial(sizes: Iterable[int]) -> tuple[int, ...]:
    return tuple(s for s in sizes if s != 1)


class SchedulerNode:
    """One computed buffer, with its loop sizes and the accesses of its body."""

    def __init__(self, buffer: ComputedBuffer, order: int):
        self.buffer = buffer
        self.name = buffer.name
        self.order = order
        self.body = buffer.body
        data = buffer.data
        ranges = data.ranges
        # the body's variables in loop order: the output's dims (pointwise: by decreasing
        # stride), then the reduced ones; size-1 dims have no variable and no loop
        self._vars = [Var(f"x{d}", ranges[d]) for d in buffer.loop_order() if ranges[d] != 1]
        if isinstance(data, Reduction):
            self.loop_sizes = _nontrivial(ranges)
            self.reduction_sizes = _nontrivial(data.reduction_ranges)
            self._vars += [Var(f"r{d}", s) for d, s in enumerate(data.reduction_ranges) if s != 1]
        else:
            self.loop_sizes = tuple(v.size for v in self._vars)
            self.reduction_sizes = ()
        self.is_reduction = isinstance(data, Reduction)
        self.is_scatter = isinstance(data, Scatter)
        self._accesses: dict[tuple[int, ...], tuple[list[tuple[str, Expr]], Expr]] = {}
        names = {name for name, _ in buffer.body.loads()}
        if isinstance(data, Scatter):
            names.add(data.target)
        self._read_names = frozenset(names)

    # -- the body in a kernel's variables -------------------------------------------
    def split(self, outer: tuple[int, ...]) -> tuple[int, ...] | None:
        """This node's inner loop sizes under ``outer`` outer loops, or None if it does not fit."""
        if self.is_reduction:
            return self.reduction_sizes if self.loop_sizes == outer else None
        if self.is_scatter:
            return () if self.loop_sizes == outer else None
        pieces = self._pieces(outer)
        if pieces is None:
            return None
        return tuple(s for p in pieces for s in p)[len(outer) :]

    def _pieces(self, outer: tuple[int, ...]) -> list[tuple[int, ...]] | None:
        """Each loop's sizes once split so that ``outer`` is a prefix of the loops (a loop of
        32 under outer loops (2, 16) becomes 2 x 16: a layer norm's (32, 32) output under its
        statistics' (2, 16) rows); None where that would take merging loops."""
        pieces, k = [], 0
        for size in self.loop_sizes:
            sub = []
            while k < len(outer) and size != 1:
                if size == outer[k]:  # the whole loop (an empty one too)
                    sub.append(size)
                    size, k = 1, k + 1
                elif 0 in (size, outer[k]) or not divides(outer[k], size):
                    return None
                else:
                    sub.append(outer[k])
                    size, k = exact_quotient(size, outer[k]), k + 1
            if size != 1:
                sub.append(size)
            pieces.append(tuple(sub))
        return pieces if k == len(outer) else None

    def refined(self, outer: tuple[int, ...]) -> SchedulerNode:
        """This node with its loops split so that ``outer`` is a prefix of them: a loop
        variable ``x`` of size 32 becomes ``16 * x_0 + x_1`` (``self`` if none splits)."""
        pieces = None if self.is_reduction or self.is_scatter else self._pieces(outer)
        if pieces is None or all(len(p) <= 1 for p in pieces):
            return self
        node = copy.copy(self)
        node._vars, mapping = [], {}
        for var, sizes in zip(self._vars, pieces, strict=True):
            parts = [Var(f"{var.name}_{k}", size) for k, size in enumerate(sizes)]
            expr, stride = Expr(), 1
            for part in reversed(parts):
                expr, stride = expr + Expr.of(part) * stride, stride * part.size
            mapping[var] = expr
            node._vars += parts
        node.loop_sizes = tuple(s for p in pieces for s in p)
        node.body = self.body.subs(mapping)
        node._accesses = {}
        return node

    def body_at(self, outer_vars: list[Expr], inner_vars: list[Expr]) -> LoopBody:
        """The body with ``outer_vars`` then ``inner_vars`` for its loops (outermost first)."""
        loops = [*outer_vars, *inner_vars]
        return self.body.subs(dict(zip(self._vars, loops, strict=True)))

    def accesses(self, outer: tuple[int, ...]) -> tuple[list[tuple[str, Expr]], Expr]:
        """(loads, store index) in canonical kernel variables ``o*`` / ``i*``."""
        if outer not in self._accesses:
            inner = self.split(outer)
            assert inner is not None
            body = self.body_at(kernel_vars(OUTER, outer), kernel_vars(INNER, inner))
            self._accesses[outer] = body.loads(), body.store.args[1]
        return self._accesses[outer]

    def read_names(self) -> frozenset[str]:
        return self._read_names

    def __repr__(self) -> str:
        data = self.buffer.data
        kind = "scatter" if self.is_scatter else "pointwise"
        if isinstance(data, Reduction):
            kind = f"reduction {data.reduction_type}[{data.output_index}]"
        return f"{self.name}({kind} {list(self.loop_sizes)} x {list(self.reduction_sizes)})"


def kernel_vars(prefix: str, sizes: Iterable[int]) -> list[Expr]:
    return make_vars(prefix, sizes)


@dataclass
class FusedKernel:
    """Nodes that run in one loop nest: ``outer`` loops around each node's inner loops."""

    nodes: list[SchedulerNode]
    outer: tuple[int, ...]
    name: str = ""

    @property
    def order(self) -> int:
        return min(n.order for n in self.nodes)

    def names(self) -> set[str]:
        return {n.name for n in self.nodes}

    def inner_of(self, node: SchedulerNode) -> tuple[int, ...]:
        inner = node.split(self.outer)
        assert inner is not None
        return inner

    def __repr__(self) -> str:
        return f"FusedKernel({self.name}, outer={list(self.outer)}, nodes={self.nodes})"


@dataclass
class ExternStep:
    kernel: ExternKernel
    order: int


@dataclass
class Schedule:
    """What the wrapper runs, in order, and which buffers never reach memory."""

    steps: list[FusedKernel | ExternStep]
    # buffers written and read only inside one kernel (not graph outputs)
    internal: set[str] = field(default_factory=set)
    fusion_log: list[str] = field(default_factory=list)


class _Ancestry:
    """Each kernel's ancestors, kept exact as kernels fuse, to refuse fusions that close a cycle.

    Fusing ``a`` and ``b`` is illegal when a path ``a -> c -> ... -> b`` runs through a kernel
    ``c`` outside them. Such a path may pass through a kernel formed by an earlier fusion
    (into one of its nodes, out of another), so the graph and the ancestors are kept per
    kernel, not per node; ancestors are bitmasks over the steps (fused nodes and extern
    calls), in program order.
    """

    def __init__(self, deps: dict[str, set[str]], order: list[str]):
        self._kernel = {name: name for name in order}  # step -> the step naming its kernel
        self._steps = {name: [name] for name in order}  # kernel -> its steps
        self._members = {name: 1 << i for i, name in enumerate(order)}  # the same, a bitmask
        self._preds = {name: set(deps[name]) for name in order}  # kernel -> kernels it reads
        self._succs: dict[str, set[str]] = {name: set() for name in order}
        self._ancestors: dict[str, int] = {}  # kernel -> the steps it depends on
        for name in order:
            mask = 0
            for d in deps[name]:
                self._succs[d].add(name)
                mask |= self._members[d] | self._ancestors[d]
            self._ancestors[name] = mask

    def creates_cycle(self, a: str, b: str) -> bool:
        """Whether fusing the kernels of steps ``a`` and ``b`` would close a cycle."""
        ka, kb = self._kernel[a], self._kernel[b]
        return self._path_through_other(ka, kb) or self._path_through_other(kb, ka)

    def _path_through_other(self, src: str, dst: str) -> bool:
        """A direct predecessor of ``dst``, other than ``src``, that depends on ``src``."""
        members = self._members[src]
        return any(p != src and self._ancestors[p] & members for p in self._preds[dst])

    def fuse(self, a: str, b: str) -> None:
        """Record that the kernels of steps ``a`` and ``b`` became one."""
        ka, kb = self._kernel[a], self._kernel[b]
        for step in self._steps[kb]:
            self._kernel[step] = ka
        self._steps[ka] += self._steps.pop(kb)
        members = self._members[ka] | self._members.pop(kb)
        self._members[ka] = members
        ancestors = (self._ancestors[ka] | self._ancestors.pop(kb)) & ~members
        self._ancestors[ka] = ancestors
        preds_b, succs_b = self._preds.pop(kb) - {ka}, self._succs.pop(kb) - {ka}
        for pred in preds_b:
            self._succs[pred].discard(kb)
            self._succs[pred].add(ka)
        for succ in succs_b:
            self._preds[succ].discard(kb)
            self._preds[succ].add(ka)
        self._preds[ka] = (self._preds[ka] - {kb}) | preds_b
        self._succs[ka] = (self._succs[ka] - {kb}) | succs_b
        # descendants now depend on the whole kernel and its ancestors; one that already
        # did has descendants that did too
        need, todo = members | ancestors, list(self._succs[ka])
        while todo:
            kernel = todo.pop()
            if need & ~self._ancestors[kernel]:
                self._ancestors[kernel] |= need
                todo.extend(self._succs[kernel])


class Scheduler:
    def __init__(
        self,
        graph: GraphIR,
        output_names: set[str],
        fuse: bool = True,
        epilogue_fusion: bool = True,
        independent_fusion: bool = True,
        max_rounds: int = 10,
    ):
        self.graph = graph
        self.output_names = output_names
        self.nodes: list[SchedulerNode] = []
        self.externs: list[ExternStep] = []
        for order, buf in enumerate(graph.buffers):
            if isinstance(buf, ComputedBuffer):
                self.nodes.append(SchedulerNode(buf, order))
            elif isinstance(buf, ExternKernel):
                self.externs.append(ExternStep(buf, order))
        self._deps = self._direct_dependencies()
        self._ancestry = _Ancestry(self._deps, self._program_order())
        self.fuse = fuse
        self.epilogue_fusion = epilogue_fusion
        self.independent_fusion = independent_fusion
        self.max_rounds = max_rounds
        self.log: list[str] = []

    # -- dependency graph --------------------------------------------------------
    def _step_name(self, name: str) -> str:
        """The scheduled step that produces buffer ``name`` (multi-outputs map to their call)."""
        buf = self._buffer_or_none(name)
        parent = getattr(buf, "parent", None)
        return parent.name if parent is not None else name

    def _buffer_or_none(self, name: str):
        try:
            return self.graph.buffer(name)
        except KeyError:
            return None

    def _direct_dependencies(self) -> dict[str, set[str]]:
        produced = {n.name for n in self.nodes} | {e.kernel.name for e in self.externs}
        deps: dict[str, set[str]] = {}
        for node in self.nodes:
            names = {self._step_name(r) for r in node.read_names()}
            deps[node.name] = {d for d in names if d in produced}
        for ext in self.externs:
            names = {self._step_name(v.buffer.name) for v in ext.kernel.tensor_args()}
            deps[ext.kernel.name] = {d for d in names if d in produced}
        if self.graph.size_definers:
            self._add_size_dependencies(deps)
        # Side-effecting extern calls keep their place relative to each other.
        last_effect = None
        for ext in self.externs:
            if ext.kernel.mutates:
                if last_effect is not None:
                    deps[ext.kernel.name].add(last_effect)
                last_effect = ext.kernel.name
        return deps

    def _add_size_dependencies(self, deps: dict[str, set[str]]) -> None:
        """Make each step that uses an unbacked size (in its sizes, body or arguments) run
        after the aten call giving it, where the wrapper reads it: ``zeros(u0)`` reads no
        buffer of that call."""
        definers = self.graph.size_definers

        def definers_in(text: str) -> set[str]:
            return {self._step_name(definers[s]) for s in symbols_in(text, definers)}

        for node in self.nodes:
            deps[node.name] |= definers_in(_sizes_text(node.buffer))
        for ext in self.externs:  # a call giving unbacked sizes names them in its layout
            deps[ext.kernel.name] |= definers_in(_extern_sizes_text(ext.kernel)) - {ext.kernel.name}

    def _program_order(self) -> list[str]:
        steps = [(n.order, n.name) for n in self.nodes] + [
            (e.order, e.kernel.name) for e in self.externs
        ]
        return [name for _, name in sorted(steps)]

    # -- fusion ------------------------------------------------------------------
    def run(self) -> Schedule:
        kernels = [FusedKernel([n], n.loop_sizes) for n in self.nodes]
        if self.fuse:
            for _ in range(self.max_rounds):
                before = len(kernels)
                kernels = self._fuse_once(kernels)
                if len(kernels) == before:
                    break
        steps = self._topological(kernels)
        for i, step in enumerate(s for s in steps if isinstance(s, FusedKernel)):
            step.name = f"kernel{i}"
        return Schedule(steps, self._internal_buffers(kernels), self.log)

    def _fuse_once(self, kernels: list[FusedKernel]) -> list[FusedKernel]:
        merged: dict[int, FusedKernel] = {i: k for i, k in enumerate(kernels)}
        owner = list(range(len(kernels)))

        def find(i: int) -> int:
            while owner[i] != i:
                i = owner[i]
            return i

        for a, b in self._candidates(kernels):
            ra, rb = find(a), find(b)
            if ra == rb:
                continue
            fused = self._try_fuse(merged[ra], merged[rb])
            if fused is not None:
                self.log.append(
                    f"fused {[n.name for n in merged[ra].nodes]} + {[n.name for n in merged[rb].nodes]}"
                )
                self._ancestry.fuse(merged[ra].nodes[0].name, merged[rb].nodes[0].name)
                merged[ra] = fused
                del merged[rb]
                owner[rb] = ra
        return sorted(merged.values(), key=lambda k: k.order)

    def _candidates(self, kernels: list[FusedKernel]) -> list[tuple[int, int]]:
        """Pairs of ``kernels`` (indices) worth fusing, best first."""
        candidates = []
        by_read: dict[str, list[int]] = {}
        for i, k in enumerate(kernels):
            for name in self._kernel_reads(k) | k.names():
                by_read.setdefault(name, []).append(i)
        seen = set()
        for idxs in by_read.values():
            for a in idxs:
                for b in idxs:
                    if a < b and (a, b) not in seen:
                        seen.add((a, b))
                        score = self._score(kernels[a], kernels[b])
                        if score > 0:
                            candidates.append(
                                (score, -abs(kernels[a].order - kernels[b].order), a, b)
                            )
        # independent kernels over the same loops: fusing saves a pass of loop overhead; or,
        # without independent fusion (a GPU), a launch where the loops are tiny pointwise
        # ones (one program runs them all): a ResNet's 20 ``num_batches_tracked += 1``
        by_outer: dict[tuple[int, ...], list[int]] = {}
        for i, k in enumerate(kernels):
            if (self.independent_fusion and k.outer) or self._tiny_pointwise(k):
                by_outer.setdefault(k.outer, []).append(i)
        for idxs in by_outer.values():
            for a, b in itertools.pairwise(idxs):
                if (a, b) not in seen:
                    seen.add((a, b))
                    candidates.append((0, -abs(kernels[a].order - kernels[b].order), a, b))
        candidates.sort(reverse=True)
        return [(a, b) for _, _, a, b in candidates]

    def _tiny_pointwise(self, k: FusedKernel) -> bool:
        return (
            not self.independent_fusion
            and hint(as_size(math.prod(k.outer))) <= TINY_LOOP
            and not any(n.is_reduction or n.is_scatter for n in k.nodes)
        )

    def _kernel_reads(self, k: FusedKernel) -> set[str]:
        out: set[str] = set()
        for n in k.nodes:
            out |= n.read_names()
        return out

    def _score(self, a: FusedKernel, b: FusedKernel) -> int:
        """Bytes of memory traffic fusing would save."""
        reads_a, reads_b = self._kernel_reads(a), self._kernel_reads(b)
        shared = (a.names() & reads_b) | (b.names() & reads_a) | (reads_a & reads_b)
        total = 0
        for name in shared:
            buf = self._buffer_or_none(name)
            if buf is not None and buf.layout is not None:
                total += max(hint(buf.layout.nbytes()), 1)
        return total

    def _try_fuse(self, a: FusedKernel, b: FusedKernel) -> FusedKernel | None:
        if a.order > b.order:
            a, b = b, a
        if any(n.is_scatter for n in (*a.nodes, *b.nodes)):
            return None
        outer = self._common_outer(a, b)
        if outer is None:
            return None
        if not self.epilogue_fusion and self._feeds_from_reduction(a, b):
            return None
        if self._ancestry.creates_cycle(a.nodes[0].name, b.nodes[0].name):
            return None
        if self._splits_without_joining_rows(a, b, outer):
            return None
        nodes = sorted([n.refined(outer) for n in (*a.nodes, *b.nodes)], key=lambda n: n.order)
        if not self._accesses_agree(nodes, outer):
            return None
        return FusedKernel(nodes, outer)

    def _splits_without_joining_rows(self, a: FusedKernel, b: FusedKernel, outer) -> bool:
        """Whether a pointwise node would split its loop to fit ``outer`` with no reduction
        over ``outer``'s rows in the kernel. The split exists to join a reduction's rows (a
        layer norm's output and its statistics); without one it only shares a read, and
        each outer iteration then walks its rows alone: on a GPU, a 100M-element node that
        joined 64 per-channel values (both read the channel statistics) ran as 64 programs
        of 1.6M elements each, 1.3 ms instead of ~0.1."""
        nodes = (*a.nodes, *b.nodes)
        if any(n.is_reduction and n.loop_sizes == outer for n in nodes):
            return False
        return any(not (n.is_reduction or n.is_scatter) and n.split(outer) for n in nodes)

    def _feeds_from_reduction(self, a: FusedKernel, b: FusedKernel) -> bool:
        """Whether a node of ``b`` reads a reduction computed in ``a``."""
        reductions = {n.name for n in a.nodes if n.is_reduction}
        return bool(reductions & self._kernel_reads(b))

    def _common_outer(self, a: FusedKernel, b: FusedKernel) -> tuple[int, ...] | None:
        options = sorted({a.outer, b.outer}, key=len)
        for outer in options:
            if not outer and (a.outer or b.outer):
                continue
            if all(n.split(outer) is not None for n in (*a.nodes, *b.nodes)):
                return outer
        # two pointwise kernels over different shapes may share their common prefix
        prefix = []
        for x, y in zip(a.outer, b.outer):
            if x != y:
                break
            prefix.append(x)
        outer = tuple(prefix)
        if outer and all(n.split(outer) is not None for n in (*a.nodes, *b.nodes)):
            return outer
        return None

    def _accesses_agree(self, nodes: list[SchedulerNode], outer: tuple[int, ...]) -> bool:
        stores = {}
        for n in nodes:
            reads, store = n.accesses(outer)
            for name, index in reads:
                if name in stores and stores[name] != index:
                    return False
            stores[n.name] = store
        return True

    # -- ordering and buffer placement ----------------------------------------------
    def _topological(self, kernels: list[FusedKernel]) -> list[FusedKernel | ExternStep]:
        steps: list[FusedKernel | ExternStep] = [*kernels, *self.externs]
        owner = {}
        for s in steps:
            for name in s.names() if isinstance(s, FusedKernel) else {s.kernel.name}:
                owner[name] = id(s)
        preds: dict[int, set[int]] = {id(s): set() for s in steps}
        for s in steps:
            names = s.names() if isinstance(s, FusedKernel) else {s.kernel.name}
            for name in names:
                for d in self._deps[name]:
                    if owner[d] != id(s):
                        preds[id(s)].add(owner[d])
        done: set[int] = set()
        out: list[FusedKernel | ExternStep] = []
        pending = sorted(steps, key=lambda s: s.order)
        while pending:
            for i, s in enumerate(pending):
                if preds[id(s)] <= done:
                    out.append(s)
                    done.add(id(s))
                    del pending[i]
                    break
            else:
                raise AssertionError("fusion created a cycle (scheduler bug)")
        return out

    def _internal_buffers(self, kernels: list[FusedKernel]) -> set[str]:
        readers: dict[str, set[int]] = {}
        for i, k in enumerate(kernels):
            for name in self._kernel_reads(k):
                readers.setdefault(name, set()).add(i)
        for ext in self.externs:
            for v in ext.kernel.tensor_args():
                readers.setdefault(v.buffer.name, set()).add(-1)
        internal = set()
        for i, k in enumerate(kernels):
            for n in k.nodes:
                if n.name in self.output_names:
                    continue
                if readers.get(n.name, set()) <= {i}:
                    internal.add(n.name)
        return internal


def _sizes_text(buf: ComputedBuffer) -> str:
    """Everything of ``buf`` that may name a size symbol: its layout, loops and body."""
    data = buf.data
    loops = (data.ranges, getattr(data, "reduction_ranges", ()))
    return f"{buf.layout} {loops}\n{buf.body}"


def _extern_sizes_text(ext: ExternKernel) -> str:
    """The same of an aten call: its arguments (views' sizes, size lists) and its results'
    layouts."""
    args = [*ext.args, *ext.kwargs.values()]
    views = [v.layout() for v in ext.tensor_args()]
    layouts = [ext.layout, *(o.layout for o in ext.outputs)]
    return f"{[a.value for a in args if a.kind != 'tensor']} {views} {layouts}"
