"""A backend chain's compiled graphs in the plan cache: a second process converts nothing.

A :class:`~torchkiln.chain.BackendChain` traces with the ``torchkiln.aot`` layer, whose
plan cache (:mod:`torchkiln.aot.cache`) stores each compiled graph through an
:class:`~torchkiln.aot.ArtifactCodec`. A chain gets a :class:`ChainStore` (and so a plan
cache) when every backend of it that runs only some ops declares a
``Capabilities.codec``; its codec stores a graph as what made it:

* a graph a partial backend compiled: that backend's codec artifact (an ONNX model,
  an exported OpenVINO model), loaded without converting anything;
* a graph a backend that runs every op compiled (inductor): the aten graph and its
  inputs' layouts, compiled again by that backend at load (inductor's own caches skip
  its C++ builds); a graph that backend runs as it is (eager): the aten graph alone;
* a split graph: the graph that calls the partitions (stored as its code) and each
  partition as above.

A graph with a part that can't be stored (its backend's codec returns ``None``) is
not cached; the reason goes to ``TORCHKILN_LOGS=aot_cache`` and
``torchkiln.counters["aot_cache"]["uncacheable"]``. The key names every backend of the
chain, its options and its codec's salt, ``config.partition_min_ops``, and torch's
thread count (the default of the runtimes' own thread counts).
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from torchkiln import config, logs
from torchkiln.aot.cache import ArtifactCodec, describe
from torchkiln.chain import CompiledPartition, Link
from torchkiln.disk_cache import Uncacheable

log = logging.getLogger("torchkiln")


@dataclass(frozen=True)
class TensorSpec:
    """The layout of a graph input: what a backend compiles a graph for."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool


@dataclass(frozen=True)
class Converted:
    """A graph partial backend ``link`` compiled: its codec's artifact (``None`` while
    only recorded, until the graph is stored)."""

    link: int
    artifact: Any = None
    #: the partition plan logged when it was compiled, logged again at load
    plan: str = ""
    #: why it was made so: the warning of a backend whose compile failed (warned at load)
    warning: str = ""


@dataclass(frozen=True)
class Recompiled:
    """A graph backend ``link`` (which runs every op) compiles again at load."""

    link: int
    graph: fx.GraphModule
    #: each input's layout (or its value, for a non-tensor)
    inputs: tuple
    plan: str = ""
    warning: str = ""


@dataclass(frozen=True)
class AsIs:
    """A graph its backend runs as it is (``gm.forward``: eager): loaded as it is."""

    graph: fx.GraphModule
    plan: str = ""
    warning: str = ""


@dataclass(frozen=True)
class Split:
    """A split graph: the graph calling ``partition_<i>``, and how each was made (while
    only recorded: the live split graph, whose partitions are recorded themselves)."""

    structure: fx.GraphModule
    parts: tuple = ()
    plan: str = ""
    warning: str = ""


Recipe = Converted | Recompiled | AsIs | Split


class ChainStore:
    """Remembers how each graph a chain compiled was made, to store it; loads it back.

    The store keeps a reference to each compiled graph it records, so that its ``id``
    stays its own.
    """

    def __init__(self, links: Sequence[Link], options: Sequence[str]):
        self.links = list(links)
        self.options = list(options)
        self._made: dict[int, tuple[Callable, Recipe | str]] = {}

    @classmethod
    def create(cls, links: Sequence[Link]) -> ChainStore | None:
        """The store of a chain, or ``None`` (said under ``aot_cache``) when a backend of the
        chain can't store what it compiles."""
        options = []
        for link in links:
            if link.partial and link.capabilities().codec is None:
                logs.artifact(
                    "aot_cache", "not cached: backend %r declares no Capabilities.codec", link.name
                )
                return None
            try:
                options.append(describe(dict(sorted(link.options.items()))))
            except Uncacheable as e:
                logs.artifact("aot_cache", "not cached: an option of backend %r: %s", link.name, e)
                return None
        return cls(links, options)

    def codec(self) -> ArtifactCodec:
        """The chain's codec; its salt names every backend, its options and code version."""
        parts = [f"partition_min_ops={config.partition_min_ops}"]
        parts.append(f"threads={torch.get_num_threads()}")
        for link, options in zip(self.links, self.options):
            salt = link.capabilities().codec.salt if link.partial else ""
            parts.append(f"{link.name}({options}){salt}")
        return ArtifactCodec("chain|" + "|".join(parts), dump=self.dump, load=self.load)

    def made_by(self, compiled: Callable, k: int, gm: fx.GraphModule, inputs: list) -> None:
        """Record that ``self.links[k]`` compiled ``gm`` for ``inputs`` into ``compiled``."""
        if self.links[k].partial:
            self._record(compiled, Converted(k))
        elif (
            compiled == gm.forward
        ):  # no fake inputs to make at load (their mode is slow to import)
            self._record(compiled, AsIs(gm))
        else:
            self._record(compiled, Recompiled(k, gm, tuple(map(_spec, inputs))))

    def made_split(self, split_gm: fx.GraphModule) -> None:
        """Record a split graph (its partitions are recorded by :meth:`made_by`)."""
        self._record(split_gm, Split(split_gm))

    def planned(self, compiled: Callable, plan: object) -> None:
        """Record the partition plan ``compiled`` was made by (logged again at load), before
        those of a partition that went to the next backend."""
        recipe = self._made[id(compiled)][1]
        if not isinstance(recipe, str):
            plans = "\n".join(filter(None, (str(plan), recipe.plan)))
            self._made[id(compiled)] = compiled, dataclasses.replace(recipe, plan=plans)

    def failed_over(self, compiled: Callable, warning: str) -> None:
        """Record that ``compiled`` runs a graph whose backend failed to compile it, with
        the warning that said so: a process that loads it warns again."""
        recipe = self._made[id(compiled)][1]
        if not isinstance(recipe, str):
            warnings = "\n".join(filter(None, (recipe.warning, warning)))
            self._made[id(compiled)] = compiled, dataclasses.replace(recipe, warning=warnings)

    def _record(self, compiled: Callable, recipe: Recipe) -> None:
        if id(compiled) in self._made:  # one callable for two graphs: which one is it?
            why = f"a backend returned one callable ({compiled!r:.60}) for two graphs"
            self._made[id(compiled)] = compiled, why
        else:
            self._made[id(compiled)] = compiled, recipe

    def dump(self, compiled: Callable, what: str = "the graph") -> Recipe:
        """The artifact of a compiled graph; raises ``Uncacheable`` naming the part that
        can't be stored."""
        found = self._made.get(id(compiled))
        if found is None:
            raise Uncacheable(f"{what} was not compiled by this chain")
        recipe = found[1]
        if isinstance(recipe, str):
            raise Uncacheable(recipe)
        if isinstance(recipe, (Recompiled, AsIs)):
            return recipe
        if isinstance(recipe, Converted):
            link = self.links[recipe.link]
            artifact = link.capabilities().codec.dump(compiled)
            if artifact is None:
                raise Uncacheable(f"backend {link.name!r} can't store {what}")
            return dataclasses.replace(recipe, artifact=artifact)
        split_gm = recipe.structure
        names = _partition_names(split_gm)
        parts = tuple(self.dump(split_gm.get_submodule(n).fn, n) for n in names)
        return dataclasses.replace(recipe, structure=_structure(split_gm, names), parts=parts)

    def load(self, recipe: Recipe) -> Callable:
        """The compiled graph again, from its artifact."""
        if recipe.plan:
            logs.artifact("partitions", "(from the plan cache)\n%s", recipe.plan)
        if recipe.warning:
            log.warning("%s (a graph from the plan cache)", recipe.warning)
        if isinstance(recipe, Converted):
            return self.links[recipe.link].capabilities().codec.load(recipe.artifact)
        if isinstance(recipe, Recompiled):
            return self.links[recipe.link].compile(recipe.graph, _fakes(recipe.inputs))
        if isinstance(recipe, AsIs):
            return recipe.graph.forward
        split_gm = recipe.structure
        for name, part in zip(_partition_names(split_gm), recipe.parts, strict=True):
            split_gm.add_submodule(name, CompiledPartition(self.load(part)))
        return split_gm


def _partition_names(split_gm: fx.GraphModule) -> list[str]:
    return [n.target for n in split_gm.graph.find_nodes(op="call_module")]


def _structure(split_gm: fx.GraphModule, names: list[str]) -> fx.GraphModule:
    """The split graph with empty modules for its partitions (it pickles as its code)."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(split_gm.graph, {}))
    constants = {
        n.target: operator.attrgetter(n.target)(split_gm) for n in graph.find_nodes(op="get_attr")
    }
    return fx.GraphModule({**constants, **{n: torch.nn.Module() for n in names}}, graph)


def _spec(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorSpec(
            tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad
        )
    return value


def _fakes(specs: tuple) -> list:
    """Fake tensors laid out as the specs say."""
    mode = FakeTensorMode()
    fakes = []
    for spec in specs:
        if isinstance(spec, TensorSpec):
            with mode:
                fake = torch.empty_strided(
                    spec.shape, spec.stride, dtype=spec.dtype, device=spec.device
                )
            spec = fake.requires_grad_(spec.requires_grad)
        fakes.append(spec)
    return fakes
