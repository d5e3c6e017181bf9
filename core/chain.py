"""Backend chains: each op of a graph goes to the first backend of a list that runs it.

``compile(fn, backend=["onnxrt", "inductor"])``, or a backend that declares
:class:`~torchkiln.plugin.Capabilities` named alone (then ``eager`` runs the rest),
compiles through a :class:`BackendChain`. The chain traces the captured graph once
with the ``torchkiln.aot`` layer (the first backend's decompositions), and splits each
forward, backward and inference graph (``torchkiln.partition``): a node goes to the
first backend that supports it, a partition smaller than
``config.partition_min_ops`` to the next one. Each partition is compiled by its
backend; one whose compile raises goes, alone, to the next backend (with a warning).
The last backend runs every op (it declares no capabilities).

``TORCHKILN_LOGS=partitions`` prints each graph's plan; the compiled graph keeps it
as ``.partition_plan``. When every partial backend of the chain can store what it
compiles, the plans go to the on-disk plan cache (``torchkiln.chain_cache``).
A backend that can't express a graph's symbolic sizes (``NeedsStaticShapes``) compiles
its partition once per concrete size (``torchkiln.static_shapes``).
"""

from __future__ import annotations

import functools
import logging
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx

from torchkiln import config, logs, runtime_wrappers
from torchkiln.exc import InvalidBackendChain, NeedsStaticShapes
from torchkiln.partition import Partition, compute_nodes, group, split
from torchkiln.plugin import Backend, Capabilities
from torchkiln.static_shapes import PerSizeCompiled

if TYPE_CHECKING:
    from torchkiln.chain_cache import ChainStore

log = logging.getLogger("torchkiln")


@dataclass
class Link:
    """One backend of a chain, with the options it compiles with."""

    record: Backend
    options: dict[str, Any] = field(default_factory=dict)
    _capabilities: Capabilities | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def partial(self) -> bool:
        return self.record.capabilities is not None

    def capabilities(self) -> Capabilities:
        """The record's capabilities, built on first use (the factory may import a runtime)."""
        if self._capabilities is None:
            declared = self.record.capabilities
            caps = declared if isinstance(declared, Capabilities) else declared()
            if not isinstance(caps, Capabilities):
                raise TypeError(
                    f"backend {self.name!r}: its capabilities factory returned "
                    f"{type(caps).__name__}; return a torchkiln.plugin.Capabilities"
                )
            self._capabilities = caps.configure(self.options) if caps.configure else caps
        return self._capabilities

    def compile(self, gm: fx.GraphModule, example_inputs: list) -> Callable:
        """Compile one functional aten graph with this backend alone."""
        with runtime_wrappers.suspended():  # the chain's own AOT layer applies them
            if self.partial:
                return self.capabilities().compile_partition(gm, example_inputs, **self.options)
            return self.record.compile_fn(gm, example_inputs, **self.options)


def check_order(links: Sequence[Link]) -> None:
    """Every backend but the last runs only some ops; the last runs them all."""
    names = [link.name for link in links]
    if not links:
        raise InvalidBackendChain(
            "backend=[] names no backend; pass a name, or a list such as "
            "['onnxrt', 'inductor'] whose last backend runs every op"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidBackendChain(
            f"backend chain {names} names {', '.join(map(repr, twice))} more than once; "
            "name each backend once"
        )
    for k, link in enumerate(links[:-1]):
        if not link.partial:
            raise InvalidBackendChain(
                f"backend {link.name!r} runs every op, so {names[k + 1 :]} after it in the "
                f"chain {names} would never run; put {link.name!r} last"
            )
    if links[-1].partial:
        raise InvalidBackendChain(
            f"the last backend of the chain {names}, {links[-1].name!r}, runs only some ops; "
            f"end the chain with one that runs every op, e.g. {[*names, 'inductor']} "
            f"or {[*names, 'eager']}"
        )


@dataclass
class PartitionPlan:
    """Which backend runs which ops of one graph, and why the others did not take them."""

    title: str
    backends: list[str]
    partitions: list[Partition]
    #: node -> why each earlier backend of the chain did not take it
    reasons: dict[fx.Node, list[str]]

    def __str__(self) -> str:
        count = Counter(self.backends[p.label] for p in self.partitions)
        per = ", ".join(f"{name}: {n}" for name, n in count.items())
        lines = [f"{self.title}: {_count(len(self.partitions), 'partition')} ({per})"]
        for i, p in enumerate(self.partitions):
            lines.append(
                f"  partition_{i} -> {self.backends[p.label]} ({_count(p.op_count, 'op')}): "
                f"{_summary(p.nodes)}"
            )
            why = {
                f"{_op_name(n)}: {'; '.join(self.reasons[n])}" for n in p.nodes if n in self.reasons
            }
            lines += [f"      {w}" for w in sorted(why)]
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _op_name(node: fx.Node) -> str:
    return getattr(node.target, "__name__", str(node.target))


def _summary(nodes: list[fx.Node]) -> str:
    """The ops of ``nodes``, counted: ``mm.default x2, add.Tensor``."""
    counts = Counter(_op_name(n) for n in nodes if n.target is not operator.getitem)
    return ", ".join(op if n == 1 else f"{op} x{n}" for op, n in counts.items())


class BackendChain:
    """A compile function ``(gm, example_inputs) -> callable`` that runs a chain of backends."""

    def __init__(self, links: Sequence[Link]):
        check_order(links)
        self.links = list(links)
        self.name = "+".join(link.name for link in self.links)
        #: When a list, every plan this chain makes is appended to it (``explain``).
        self.recorded_plans: list[PartitionPlan] | None = None

    def record_plans(self, into: list[PartitionPlan]) -> None:
        """Append every plan made from now on to ``into``; the plan cache goes off, since a
        graph loaded from disk is run without being planned."""
        self.recorded_plans = into
        self.store = None

    @functools.cached_property
    def store(self) -> ChainStore | None:
        """How the compiled graphs were made, for the plan cache (``torchkiln.chain_cache``);
        ``None`` when a backend of the chain can't store them. Built on the first compile:
        capabilities import their runtimes."""
        from torchkiln.chain_cache import ChainStore

        return ChainStore.create(self.links)

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> Callable:
        from torchkiln.aot import aot_autograd, default_decompositions
        from torchkiln.aot.partition import MaterializingMinCut

        first = self.links[0].capabilities()
        table = first.decompositions() if first.decompositions else default_decompositions()
        compilers = {
            f"{kind}_compiler": functools.partial(self.compile_graph, title=f"{title} graph")
            for kind, title in (("fw", "forward"), ("bw", "backward"), ("inference", "inference"))
        }
        cache = self.store.codec() if self.store is not None else None
        partition_fn = None
        if self.links[0].partial and first.saves_for_others:

            def materialized(node: fx.Node) -> bool:
                return node.op == "call_function" and first.verdict(node) is not True

            partition_fn = MaterializingMinCut(materialized)
        return aot_autograd(
            decompositions=table, cache=cache, partition_fn=partition_fn, **compilers
        )(gm, example_inputs)

    def plan(self, gm: fx.GraphModule, start: int = 0, title: str = "graph") -> PartitionPlan:
        """Split ``gm`` among ``self.links[start:]`` (labels index ``self.links``)."""
        reasons: dict[fx.Node, list[str]] = {}
        floor: dict[fx.Node, int] = {}
        verdicts: dict[tuple[fx.Node, int], bool | str] = {}

        def verdict(node: fx.Node, k: int) -> bool | str:
            link = self.links[k]
            if not link.partial:
                return True
            if (node, k) not in verdicts:
                verdicts[node, k] = link.capabilities().verdict(node)
            return verdicts[node, k]

        def label_of(node: fx.Node) -> int:
            k = floor.get(node, start)
            while verdict(node, k) is not True:
                k += 1
            return k

        while True:
            partitions = group(gm.graph, label_of)
            small = [
                p
                for p in partitions
                if self.links[p.label].partial and p.op_count < config.partition_min_ops
            ]
            if not small:
                break
            for p in small:
                for node in p.nodes:
                    floor[node] = p.label + 1
                    reasons.setdefault(node, []).append(
                        f"{self.links[p.label].name}: its partition has "
                        f"{_count(p.op_count, 'op')}, fewer "
                        f"than config.partition_min_ops={config.partition_min_ops}"
                    )
        for node in compute_nodes(gm.graph):
            rejected = [
                f"{self.links[k].name}: {verdicts[node, k]}"
                for k in range(start, len(self.links))
                if verdicts.get((node, k), True) is not True
            ]
            if rejected:
                reasons.setdefault(node, [])[:0] = rejected
        return PartitionPlan(title, [link.name for link in self.links], partitions, reasons)

    def compile_graph(
        self, gm: fx.GraphModule, example_inputs: list, start: int = 0, title: str = "graph"
    ) -> Callable:
        """Compile one functional aten graph with ``self.links[start:]``."""
        plan = self.plan(gm, start, title)
        logs.artifact("partitions", "%s", plan)
        if self.recorded_plans is not None:
            self.recorded_plans.append(plan)
        if len(plan.partitions) <= 1:
            label = plan.partitions[0].label if plan.partitions else len(self.links) - 1
            compiled = self._compile_part(gm, example_inputs, label, title)
        else:
            compiled = split(gm, plan.partitions)
            # A partition's inputs that are the graph's own come as example_inputs has them
            # (a backward's saved values in the strides its forward gave them), not as traced.
            placeholders = gm.graph.find_nodes(op="placeholder")
            given = {p.name: example for p, example in zip(placeholders, example_inputs)}
            for i, partition in enumerate(plan.partitions):
                name = f"partition_{i}"
                sub = compiled.get_submodule(name)
                examples = [
                    given.get(p.name, p.meta.get("val"))
                    for p in sub.graph.find_nodes(op="placeholder")
                ]
                part = self._compile_part(sub, examples, partition.label, name)
                compiled.add_submodule(name, CompiledPartition(part))
            compiled.partition_plan = plan
            if self.store is not None:
                self.store.made_split(compiled)
        if self.store is not None:
            self.store.planned(compiled, plan)
        return compiled

    def _compile_part(
        self, gm: fx.GraphModule, example_inputs: list, k: int, what: str
    ) -> Callable:
        link = self.links[k]
        try:
            compiled = link.compile(gm, example_inputs)
        except NeedsStaticShapes as e:
            log.info("backend %r compiles %s once per concrete size: %s", link.name, what, e)
            compiled = PerSizeCompiled(
                gm, functools.partial(self._compile_part, k=k, what=what), None
            )
        except Exception as e:
            if not link.partial:
                raise
            ops = _summary(compute_nodes(gm.graph))
            warning = (
                f"backend {link.name!r} failed to compile {what} ({type(e).__name__}: {e}); "
                f"running it with {self.links[k + 1].name!r} instead (ops: {ops})"
            )
            log.warning("%s", warning)  # once per partition: it is compiled once
            compiled = self.compile_graph(gm, example_inputs, start=k + 1, title=what)
            if self.store is not None:
                self.store.failed_over(compiled, warning)
            return compiled
        if self.store is not None:
            self.store.made_by(compiled, k, gm, example_inputs)
        return compiled


class CompiledPartition(torch.nn.Module):
    """A compiled partition, called by the split graph as its submodule."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)
