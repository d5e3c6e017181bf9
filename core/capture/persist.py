"""Captures kept across processes: a second process loads what the first one translated.

A cache entry is text plus a namespace: guard expressions, the transformed
function's source, the graph, and the objects those names stand for. A
*record* stores the text and, for each name, a recipe that finds the
equivalent object in another process:

- ``import``: ``module:qualname`` (functions, classes, torch callables);
  ``module``: a Python module; ``globals``: a module's ``__dict__``;
  ``enum``: a member of an importable enum;
- ``value``: a plain value (a dtype, a device, a tuple of constants), pickled;
- ``pin``: an object guarded by identity but held weakly (an inner function,
  a code object: ``GuardSet.identity``), read through its source from the
  call's own arguments and checked once on load (same code);
- ``cell``: closure cell ``i`` of a function named earlier;
- ``class_keys``: the keys of a class named earlier (``GuardSet.class_keys``);
- ``resume`` / ``call_through``: the graph-break helpers, rebuilt for this frame.

A capture whose namespace holds anything else (a tensor constant, a lambda)
is not kept. A record is keyed by the frame's code, the backend and its
options (``GraphCompiler.cache_key``), torchkiln's code, torch and Python,
and is valid while every source file the translation read is unchanged
(its SHA-256: an edit that keeps size and modification time, as ``tar``,
``rsync -a`` or Nix make, counts). Records go through
:func:`torchkiln.disk_cache.read_entry`, which checks who wrote them and that
they are whole before anything is unpickled. Loading one resolves the recipes and runs
its guards on the call that missed: only a
record whose guards pass becomes a cache entry, so a loaded entry rests on
the same assumptions a fresh capture would make. Its graph is handed to the
backend as at capture time (the backend's own caches make that cheap).

Counted in ``torchkiln.counters["capture_cache"]`` (``hits``, ``misses``,
``stores``, ``unportable``); ``TORCHKILN_LOGS=capture_cache`` says why a
capture was not kept or a record not used.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import os
import pickle
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

import torchkiln
from torchkiln import config, logs
from torchkiln.capture import inference_mode
from torchkiln.capture.aliasing import is_weight
from torchkiln.capture.frame_capture import CacheEntry
from torchkiln.capture.graph_break import CallThroughDispatch, ResumeCall
from torchkiln.capture.guards import NATIVE_GUARD, Guard, GuardSet
from torchkiln.capture.signature import arg_names, local_name, params_text
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
from torchkiln.exc import Unsupported
from torchkiln.static_shapes import has_symbolic_values
from torchkiln.stats import counters

#: Bump when the record layout changes.
FORMAT = 2

#: Names the entry's own code defines in its namespace: never stored.
_GENERATED = {
    "___guard", "___first_failure", "___descriptions", "___transformed", "___graph", NATIVE_GUARD,
}  # fmt: skip

#: Plain values stored by pickling: equal in every process.
_PLAIN_TYPES = (
    type(None), bool, int, float, complex, str, bytes, type(Ellipsis),
    torch.dtype, torch.device, torch.layout, torch.memory_format,
)  # fmt: skip


@dataclass
class Record:
    """One stored cache entry; see the module docstring."""

    guards: list[Guard]
    sources: frozenset[str]
    #: the guards rewritten to read each long source once (``GuardSet.hoisted_exprs``)
    hoisted: list[str]
    recipes: list[tuple[str, tuple]]
    files: dict[str, str]
    code_source: str
    graph: list | None
    graph_args: list[str] | None
    break_reasons: list[tuple[str, str | None]]
    eager_reason: tuple[str, str | None] | None


# -- keys ---------------------------------------------------------------------------


def _stable_repr(value: Any) -> str:
    if isinstance(value, frozenset):
        return "frozenset(" + ",".join(sorted(_stable_repr(v) for v in value)) + ")"
    if isinstance(value, tuple):
        return "(" + ",".join(_stable_repr(v) for v in value) + ")"
    if isinstance(value, types.CodeType):
        return code_fingerprint(value)
    return repr(value)


def code_fingerprint(code: types.CodeType) -> str:
    """A hash of everything that decides what ``code`` does, nested code objects included."""
    h = hashlib.sha256()
    for part in (
        code.co_filename, code.co_qualname, code.co_firstlineno, code.co_argcount,
        code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags, code.co_names,
        code.co_varnames, code.co_freevars, code.co_cellvars,
    ):  # fmt: skip
        h.update(repr(part).encode())
    h.update(code.co_code)
    h.update(code.co_exceptiontable)
    h.update(_stable_repr(code.co_consts).encode())
    return h.hexdigest()


def _config_text() -> str:
    return repr(
        sorted(
            (k, v)
            for k, v in vars(config).items()
            if not k.startswith("_") and type(v) in (bool, int, float, str)
        )
    )


def record_path(code: types.CodeType, cfg: Any) -> Path | None:
    """Where the records of ``code`` under ``cfg`` live; None if the backend has no stable key."""
    key_of = getattr(cfg.compile_graph, "cache_key", None)
    backend = key_of() if key_of is not None else None
    if backend is None:
        return None
    parts = (
        str(FORMAT),
        sys.version,
        torch.__version__,
        source_fingerprint(str(Path(torchkiln.__file__).parent)),
        _config_text(),
        backend,
        str(cfg.fullgraph),
        code_fingerprint(code),
    )
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return cache_dir() / "capture" / key[:2] / f"{key}.pkl"


# -- storing --------------------------------------------------------------------------


def store(fn: types.FunctionType, cfg: Any, entry: CacheEntry) -> None:
    """Keep ``entry`` (just captured for ``fn``) on disk, unless it holds something unportable."""
    path = record_path(fn.__code__, cfg)
    if path is None or entry.guard_set is None:
        return
    # symbolic sizes (of inputs, or data-dependent ones): a record would reload as static
    if entry.guard_set.shapes is not None or any(map(has_symbolic_values, entry.graphs)):
        counters["capture_cache"]["unportable"] += 1
        logs.artifact("capture_cache", "not kept: %s: symbolic sizes", fn.__code__.co_qualname)
        return
    try:
        record = _record_of(entry)
        previous = [r for r in _read(path) if _fresh(r.files) and not _same(r, record)]
        records = [*previous, record][-max(config.cache_size_limit, 1) :]
        data = dumps((FORMAT, records))
    # RuntimeError: what pybind11 objects raise when pickled
    except (Uncacheable, pickle.PicklingError, TypeError, AttributeError, RuntimeError) as e:
        counters["capture_cache"]["unportable"] += 1
        logs.artifact("capture_cache", "not kept: %s: %s", fn.__code__.co_qualname, e)
        return
    if not write_entry(path, data):
        logs.artifact("capture_cache", "could not write %s", path)
        return
    counters["capture_cache"]["stores"] += 1


def _same(a: Record, b: Record) -> bool:
    return a.code_source == b.code_source and [g.expr for g in a.guards] == [
        g.expr for g in b.guards
    ]


def _record_of(entry: CacheEntry) -> Record:
    guard_set = entry.guard_set
    assert guard_set is not None
    recipes = [
        (name, _recipe(name, value, guard_set))
        for name, value in guard_set.ns.items()
        if name not in _GENERATED and name != "__builtins__"
    ]
    files = set(guard_set.code_files)
    for name, recipe in recipes:
        if recipe[0] == "import":
            files.update(_defining_files(guard_set.ns[name]))
        elif recipe[0] == "member":  # the class's files define what the member does
            files.update(_defining_files(_import(recipe[1])))
    # frozen standard-library modules are fixed by the Python version in the key
    files = {f for f in files if not f.startswith("<frozen ")}
    eager = entry.eager_reason
    return Record(
        guards=guard_set.ordered(),
        sources=guard_set.sources,
        hoisted=guard_set.hoisted_exprs(),
        recipes=recipes,
        files={f: _content_hash(f) for f in sorted(files)},
        code_source=entry.code_source,
        graph=_graph_to_data(entry.graphs[0]) if entry.graphs else None,
        graph_args=entry.graph_args,
        break_reasons=[(r.reason, r.location) for r in entry.break_reasons],
        eager_reason=(eager.reason, eager.location) if eager is not None else None,
    )


def _recipe(name: str, value: Any, guard_set: GuardSet) -> tuple:
    """How another process finds the object ``name`` stands for; raises ``Uncacheable``."""
    if name in guard_set.weak:
        return _pin(name, guard_set)
    if name in guard_set.cell_owners:
        owner, index = guard_set.cell_owners[name]
        return ("cell", owner, index)
    owner = next((c for c, keys in guard_set.class_keys.items() if keys == name), None)
    if owner is not None:
        return ("class_keys", owner)
    if isinstance(value, ResumeCall):
        return ("resume", value.layout, value.compiled)
    if isinstance(value, CallThroughDispatch):
        return ("call_through",)
    if isinstance(value, types.ModuleType):
        if sys.modules.get(value.__name__) is value:
            return ("module", value.__name__)
    elif type(value) is dict and isinstance(value.get("__name__"), str):
        module = sys.modules.get(value["__name__"])
        if module is not None and module.__dict__ is value:
            return ("globals", module.__name__)
    elif isinstance(value, enum.Enum):
        return ("enum", stable_name(type(value)), value.name)
    elif _is_plain(value):
        return ("value", value)
    elif isinstance(value, inspect.Signature):
        return ("value", value)  # pickled; its annotations and defaults must pickle too
    try:
        # a function found by name must still be the code that was traced: the name may
        # have been rebound (monkeypatched) since
        code = value.__code__ if isinstance(value, types.FunctionType) else None
        return ("import", _importable_name(value), code and code_fingerprint(code))
    except Uncacheable:
        pass
    member = _class_member(value)
    if member is not None:
        return ("member", *member)
    raise Uncacheable(f"{name} holds a {type(value).__qualname__} with no recipe")


def _class_member(value: Any) -> tuple[str, str, tuple] | None:
    """``(class, attribute, fingerprints)`` naming a descriptor (property, classmethod,
    staticmethod, cached_property) in its class's ``__dict__``, found through its function's
    qualname, with the fingerprints of the code it runs: a class given another descriptor of
    that name since (a monkeypatched property) must not pass for it. None for anything else,
    and for functions with closures, whose cells a fingerprint does not cover."""
    functions = [f for f in _member_functions(value) if f is not None]
    if not functions or any(f.__closure__ for f in functions):
        return None
    owner_path, _, attr = functions[0].__qualname__.rpartition(".")
    module = sys.modules.get(functions[0].__module__ or "")
    if module is None or not owner_path or "<" in owner_path:
        return None
    owner: Any = module
    for part in owner_path.split("."):
        owner = getattr(owner, part, None)
    if not isinstance(owner, type) or owner.__dict__.get(attr) is not value:
        return None
    try:
        return stable_name(owner), attr, _member_fingerprints(value)
    except Uncacheable:
        return None


def _member_functions(value: Any) -> list[types.FunctionType | None]:
    """The Python function in each slot a descriptor may have (None where it has none)."""
    slots = (getattr(value, a, None) for a in ("fget", "fset", "fdel", "__func__", "func"))
    return [f if isinstance(f, types.FunctionType) else None for f in slots]


def _member_fingerprints(value: Any) -> tuple:
    """The code fingerprint of each function slot of a descriptor (None where it has none)."""
    return tuple(f and code_fingerprint(f.__code__) for f in _member_functions(value))


def _pin(name: str, guard_set: GuardSet) -> tuple:
    """The recipe of an object guarded by identity and held weakly (``GuardSet.identity``)."""
    value = guard_set.weak[name]()
    if isinstance(value, types.FunctionType):
        value = value.__code__
    if not isinstance(value, types.CodeType):
        raise Uncacheable(f"{name} is the id of a {type(value).__qualname__} with no recipe")
    return ("pin", guard_set.pins[name], code_fingerprint(value))


def _is_plain(value: Any) -> bool:
    if type(value) in _PLAIN_TYPES:
        return True
    if type(value) in (tuple, frozenset, torch.Size, slice):
        items = (value.start, value.stop, value.step) if type(value) is slice else value
        return all(_is_plain(v) for v in items)
    return False


def _importable_name(value: Any) -> str:
    """``stable_name``, plus the builtin types only ``types`` names (``types.MethodType``)."""
    if isinstance(value, type) and value.__module__ == "builtins":
        for name, member in vars(types).items():
            if member is value:
                return f"types:{name}"
    return stable_name(value)


def _defining_files(value: Any) -> list[str]:
    """The source files that define an imported function or class (its behaviour)."""
    if isinstance(value, types.FunctionType):
        return [value.__code__.co_filename]
    if isinstance(value, type):  # class attributes may come from any base class
        modules = (sys.modules.get(cls.__module__) for cls in value.__mro__)
        return [path for m in modules if (path := getattr(m, "__file__", None))]
    return []


#: Per file, the status it was hashed at and its hash: each version is read once per process.
_hashes: dict[str, tuple[tuple[int, ...], str]] = {}


def _content_hash(path: str) -> str:
    """The SHA-256 of a source file, hashed again only when its status changed (the change
    time included, which no tool sets back)."""
    try:
        st = os.stat(path)
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = _hashes.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise Uncacheable(f"code from {path!r}, which is not a file") from e
    _hashes[path] = (stamp, digest)
    return digest


def _fresh(files: dict[str, str]) -> bool:
    try:
        return all(_content_hash(path) == digest for path, digest in files.items())
    except Uncacheable:
        return False


class _NodeRef:
    """A graph node's position, standing for the node in a stored graph."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __reduce__(self) -> tuple:
        return (_NodeRef, (self.index,))


def _graph_to_data(gm: fx.GraphModule) -> list[tuple]:
    index: dict[fx.Node, int] = {}
    nodes = []
    for i, node in enumerate(gm.graph.nodes):
        if node.op in ("get_attr", "call_module"):
            raise Uncacheable(f"the graph has a {node.op} node")
        index[node] = i

        def ref(n: fx.Node) -> _NodeRef:
            return _NodeRef(index[n])

        args = fx.node.map_arg(node.args, ref)
        kwargs = fx.node.map_arg(node.kwargs, ref)
        nodes.append((node.op, node.name, node.target, args, kwargs))
    return nodes


def _graph_from_data(data: list[tuple]) -> fx.GraphModule:
    graph = fx.Graph()
    nodes: list[fx.Node] = []

    def node_of(a: Any) -> Any:
        return nodes[a.index] if isinstance(a, _NodeRef) else a

    for op, name, target, args, kwargs in data:
        args = fx.node.map_aggregate(args, node_of)
        kwargs = fx.node.map_aggregate(kwargs, node_of)
        nodes.append(graph.create_node(op, target, args, kwargs, name=name))
    return fx.GraphModule(torch.nn.Module(), graph)


# -- loading --------------------------------------------------------------------------


def _read(path: Path) -> list[Record]:
    """The records at ``path``; none if it is missing, damaged (deleted) or of another format."""
    try:
        data = read_entry(path)
        if data is None:
            return []
        fmt, records = loads(data)
        if fmt != FORMAT:
            return []
        return records
    except Exception as e:
        logs.artifact("capture_cache", "discarding unreadable %s: %s", path, e)
        discard(path)
        return []


def load(fn: types.FunctionType, cfg: Any, args: tuple) -> CacheEntry | None:
    """A cache entry for this call from a stored record whose checks and guards pass, or None."""
    path = record_path(fn.__code__, cfg)
    if path is None:
        return None
    for record in _read(path):
        if not _fresh(record.files):
            continue
        try:
            entry = _entry_of(record, fn, cfg, args)
        except Exception as e:  # an object moved or changed since: capture afresh
            logs.artifact("capture_cache", "record of %s not used: %s", fn.__code__.co_qualname, e)
            continue
        if entry is not None:
            counters["capture_cache"]["hits"] += 1
            return entry
    counters["capture_cache"]["misses"] += 1
    return None


class _Mismatch(Exception):
    """A pinned object is not what the record expects."""


def _entry_of(record: Record, fn: types.FunctionType, cfg: Any, args: tuple) -> CacheEntry | None:
    code = fn.__code__
    frame = {"___fn": fn}
    frame.update(
        (local_name(name, i), value) for i, (name, value) in enumerate(zip(arg_names(code), args))
    )
    ns: dict[str, Any] = {}
    for name, recipe in record.recipes:
        ns[name] = _resolve(recipe, ns, frame, code, cfg)
    guard_set = GuardSet.restored(ns, record.guards, record.sources, record.hoisted)
    for name, recipe in record.recipes:
        if recipe[0] == "pin":  # guarded by id and held weakly, as at capture
            guard_set.hold_weakly(ns[name], name)
    params = params_text(code)
    filename = f"<torchkiln {code.co_name} {code.co_filename}:{code.co_firstlineno}>"
    guard, first_failure, guard_source = guard_set.compile(params, filename)
    if not guard(fn, *args):
        return None
    exec(compile(record.code_source, filename, "exec"), ns)
    graphs = []
    if record.graph is not None:
        gm = _graph_from_data(record.graph)
        read_inputs = eval(f"lambda {params}: [{', '.join(record.graph_args or ())}]", ns)
        inputs = read_inputs(fn, *args)
        placeholders = gm.graph.find_nodes(op="placeholder")
        for node, source, value in zip(placeholders, record.graph_args or (), inputs):
            node.meta["weight"] = is_weight(source, value)
        ns["___graph"] = inference_mode.compile_graph(gm, inputs, cfg.compile_graph)
        graphs.append(gm)
    eager = record.eager_reason
    return CacheEntry(
        guard,
        ns["___transformed"],
        first_failure,
        guard_source,
        record.code_source,
        graphs=graphs,
        break_reasons=[Unsupported(*r) for r in record.break_reasons],
        eager_reason=Unsupported(*eager) if eager is not None else None,
        guard_descriptions=[g.description for g in guard_set.ordered()],
        guard_set=guard_set,
        graph_args=record.graph_args,
    )


def _resolve(recipe: tuple, ns: dict, frame: dict, code: types.CodeType, cfg: Any) -> Any:
    kind = recipe[0]
    if kind == "value":
        return recipe[1]
    if kind == "import":
        found = _import(recipe[1])
        if recipe[2] is not None and code_fingerprint(found.__code__) != recipe[2]:
            raise _Mismatch(f"{recipe[1]} has other code")
        return found
    if kind == "module":
        return sys.modules[recipe[1]]
    if kind == "globals":
        return sys.modules[recipe[1]].__dict__
    if kind == "enum":
        return _import(recipe[1])[recipe[2]]
    if kind == "member":
        found = _import(recipe[1]).__dict__[recipe[2]]
        if _member_fingerprints(found) != recipe[3]:
            raise _Mismatch(f"{recipe[1]}.{recipe[2]} is another {type(found).__name__}")
        return found
    if kind == "cell":
        return ns[recipe[1]].__closure__[recipe[2]]
    if kind == "class_keys":
        return ns[recipe[1]].__dict__.keys()
    if kind == "resume":
        return ResumeCall(code, recipe[1], cfg, recipe[2])
    if kind == "call_through":
        return CallThroughDispatch(cfg)
    if kind == "pin":
        _, source, expected = recipe
        value = eval(source, ns, frame)
        found = value if isinstance(value, types.CodeType) else value.__code__
        if code_fingerprint(found) != expected:
            raise _Mismatch(f"{source} has other code")
        return value
    raise _Mismatch(f"unknown recipe {kind!r}")


def _import(name: str) -> Any:
    """The object ``stable_name`` (or ``_importable_name``) named."""
    module_name, _, path = name.partition(":")
    if module_name == "op":  # a torch.ops overload or packet: aten.add.Tensor
        found: Any = torch.ops
    else:
        __import__(module_name)
        found = sys.modules[module_name]
    for part in path.split("."):
        found = getattr(found, part)
    return found
