"""A disk cache of compiled plans: a second process compiling the same graph traces nothing.

What the AOT layer builds for a graph (its :class:`GraphMeta`, the forward
and backward graphs, each compiled by the backend) depends only on the
torch-level graph, the metadata of its inputs, whether the call trains, the
global state tracing reads (default dtype, autocast), the decompositions,
the partitioner, the backend (its ``salt``: name, options, code version) and
torchkiln's own code. :meth:`PlanCache.key` hashes all of it. A graph with a
piece that has no stable name across processes (a call to a lambda or a
closure, an argument of an unknown type, a symbolic size) gets no key and is
simply not cached; the reason is logged under ``TORCHKILN_LOGS=aot_cache``
and counted in ``torchkiln.counters["aot_cache"]`` (``hits``, ``misses``,
``stores``, ``uncacheable``).

A backend opts in by passing ``cache=ArtifactCodec(...)`` to ``aot_autograd``:
``dump`` turns one compiled graph into a picklable artifact (``None``: this
one can't be stored) and ``load`` turns an artifact back into a callable.
Entries live in ``<cache_dir>/aot/<key[:2]>/<key>.pkl``, pickled with
``torch.ops`` overloads stored by name, and go through
:func:`torchkiln.disk_cache.read_entry` (who wrote it, is it whole) before
anything is unpickled. A training plan is stored once its
backward is compiled (the first backward call), so a stored plan is always
complete; an inference plan as soon as it is built. An entry that can't be
read or unpickled is a miss, and is deleted so that it gets rebuilt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch.utils._device import DeviceContext

import torchkiln
from torchkiln import logs
from torchkiln.aot.analysis import GraphMeta
from torchkiln.aot.runtime import TrainingPlan
from torchkiln.capture.guards import autocast_state
from torchkiln.disk_cache import (
    Uncacheable,
    cache_dir,
    discard,
    dumps,
    loads,
    read_entry,
    source_fingerprint,
    stable_name,
    write_entry,
)
from torchkiln.stats import counters

#: Bump when the entry layout changes.
FORMAT = 1


@dataclass(frozen=True)
class ArtifactCodec:
    """How a backend's compiled graphs go to disk and come back.

    ``salt`` names everything besides the graph that decides what the backend
    produces (its name, options and code version); ``dump(compiled)`` returns
    a picklable artifact, or ``None`` (or raises ``torchkiln.disk_cache.Uncacheable``
    saying why) when it can't be stored; ``load(artifact)`` returns the callable.
    """

    salt: str
    dump: Callable[[Callable], Any]
    load: Callable[[Any], Callable]


def describe(value: object) -> str:
    """A node argument as text that means the same thing in every process."""
    if isinstance(value, fx.Node):
        return f"%{value.name}"
    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({','.join(describe(v) for v in value)})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{describe(k)}:{describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        return f"slice({describe(value.start)},{describe(value.stop)},{describe(value.step)})"
    if isinstance(value, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return repr(value)
    if isinstance(value, torch.Tensor):
        return _describe_constant(value)
    if callable(value):
        return stable_name(value)
    raise Uncacheable(f"graph argument {value!r} of type {type(value).__name__}")


def _require_real(t: torch.Tensor, what: str) -> None:
    if isinstance(t, torch._subclasses.FakeTensor) or not all(isinstance(s, int) for s in t.shape):
        raise Uncacheable(f"{what} is a fake or symbolic tensor")


def _describe_constant(t: torch.Tensor) -> str:
    """A tensor baked into the graph: its layout and the hash of its contents."""
    _require_real(t, "a tensor constant")
    data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    digest = hashlib.sha256(data).hexdigest()
    return f"tensor({tuple(t.shape)},{t.stride()},{t.dtype},{t.device},{t.requires_grad},{digest})"


def graph_fingerprint(gm: fx.GraphModule) -> str:
    """The graph as text: op, target and arguments of every node, by stable names."""
    lines = []
    for node in gm.graph.nodes:
        target = node.target
        if node.op == "get_attr":
            value: object = gm
            for part in str(target).split("."):
                value = getattr(value, part)
            target = describe(value)
        elif node.op == "call_module":
            raise Uncacheable("the graph calls a submodule")
        elif not isinstance(target, str):
            target = stable_name(target)
        lines.append(
            f"{node.name}={node.op}[{target}]({describe(node.args)};{describe(node.kwargs)})"
        )
    return "\n".join(lines)


def inputs_fingerprint(args: list) -> str:
    """Metadata tracing depends on: layout, dtype, device, requires_grad and aliasing of tensors;
    the values of everything else."""
    storages: dict[int, int] = {}
    parts = []
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            parts.append(describe(a))
            continue
        _require_real(a, f"input {i}")
        storage = storages.setdefault(a.untyped_storage()._cdata, i)
        parts.append(
            f"{type(a).__module__}.{type(a).__qualname__}({tuple(a.shape)},{a.stride()},"
            f"{a.storage_offset()},{a.dtype},{a.device},{a.requires_grad},{a._is_view()},"
            f"storage of {storage})"
        )
    return "|".join(parts)


def _global_state() -> str:
    """Global settings tracing or a backend bakes into a graph (autocast: every device's
    dtype too; TF32; the default device). A user's torch function mode changes what
    tracing records in ways its type alone does not name: such graphs are not stored."""
    modes = torch.overrides._get_current_function_mode_stack()
    if any(not isinstance(mode, DeviceContext) for mode in modes):
        raise Uncacheable("a torch function mode is active")
    return (
        f"{torch.get_default_dtype()}|{autocast_state()}|{torch.is_inference_mode_enabled()}|"
        f"{torch.are_deterministic_algorithms_enabled()}|{torch._C._get_cublas_allow_tf32()}|"
        f"{torch._C._get_cudnn_allow_tf32()}|{torch.get_default_device() if modes else ''}"
    )


#: The namespaces whose decompositions the key names: torch registers the others (the
#: collectives' ``c10d_functional``, test ops) when a module is imported, which one process
#: may have done before compiling and another not; they change nothing for a graph that
#: doesn't call those ops, and one that does names them itself.
KEYED_NAMESPACES = ("aten", "prims")


def _keyed(op: object) -> bool:
    return str(op).partition(".")[0] in KEYED_NAMESPACES  # aten.add.Tensor, aten.add


class PlanCache:
    """Looks up and stores the plans of one ``aot_autograd`` backend."""

    def __init__(
        self,
        codec: ArtifactCodec,
        decompositions: Mapping | None,
        partition_fn: Callable,
    ) -> None:
        self.codec = codec
        ops = ",".join(sorted(str(op) for op in decompositions or () if _keyed(op)))
        self._fixed = "\0".join(
            (
                str(FORMAT),
                torch.__version__,
                source_fingerprint(str(Path(torchkiln.__file__).parent)),
                codec.salt,
                ops,
                getattr(partition_fn, "cache_name", None) or stable_name(partition_fn),
            )
        )

    def key(self, gm: fx.GraphModule, args: list, training: bool) -> str | None:
        """The entry's key, or ``None`` when this graph can't be cached."""
        try:
            parts = (
                self._fixed,
                graph_fingerprint(gm),
                inputs_fingerprint(args),
                _global_state(),
                str(training),
            )
        except Uncacheable as e:
            _not_cached(str(e))
            return None
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    @staticmethod
    def _path(key: str) -> Path:
        return cache_dir() / "aot" / key[:2] / f"{key}.pkl"

    def load(self, key: str) -> tuple[GraphMeta, Any] | None:
        """The stored plan, ready to run, or ``None``."""
        path = self._path(key)
        try:
            data = read_entry(path)
            if data is None:
                counters["aot_cache"]["misses"] += 1
                return None
            entry = loads(data)
            meta = entry["meta"]
            forward = self.codec.load(entry["forward"])
            if entry["kind"] == "inference":
                plan: Any = forward
            else:
                plan = TrainingPlan(
                    meta=meta,
                    forward=forward,
                    backward_graph=None,
                    backward_compiler=None,
                    num_fwd_outputs=entry["num_fwd_outputs"],
                    differentiable=entry["differentiable"],
                    grad_inputs=entry["grad_inputs"],
                    compiled_backward=self.codec.load(entry["backward"]),
                )
        except Exception as e:  # a damaged or stale entry: rebuild it
            logs.artifact("aot_cache", "discarding unreadable entry %s: %s", path, e)
            counters["aot_cache"]["misses"] += 1
            discard(path)
            return None
        counters["aot_cache"]["hits"] += 1
        logs.artifact("aot_cache", "hit %s", key)
        return meta, plan

    def store_inference(self, key: str, meta: GraphMeta, compiled: Callable) -> None:
        self._store(key, {"kind": "inference", "meta": meta, "forward": compiled})

    def store_training(self, key: str, plan: TrainingPlan) -> None:
        self._store(
            key,
            {
                "kind": "training",
                "meta": plan.meta,
                "forward": plan.forward,
                "backward": plan.compiled_backward,
                "num_fwd_outputs": plan.num_fwd_outputs,
                "differentiable": plan.differentiable,
                "grad_inputs": plan.grad_inputs,
            },
        )

    def _store(self, key: str, entry: dict[str, Any]) -> None:
        """Store an entry; a plan that can't be stored still runs, so failures are only logged."""
        for graph in ("forward", "backward"):
            if graph in entry:
                try:
                    entry[graph] = self.codec.dump(entry[graph])
                except Uncacheable as e:
                    _not_cached(f"its {graph} graph: {e}")
                    return
                if entry[graph] is None:
                    _not_cached(f"the backend can't store its {graph} graph")
                    return
        try:
            data = dumps(entry)
        except Exception as e:  # unpicklable values (a local class as output container)
            _not_cached(f"{type(e).__name__}: {e}")
            return
        if not write_entry(self._path(key), data):
            _not_cached("the cache could not be written")
            return
        counters["aot_cache"]["stores"] += 1
        logs.artifact("aot_cache", "stored %s", key)


def _not_cached(why: str) -> None:
    counters["aot_cache"]["uncacheable"] += 1
    logs.artifact("aot_cache", "not cached: %s", why)
