"""Variable trackers: what the translator knows about each stack slot and local.

Every value the symbolic interpreter handles is a ``VariableTracker``. A
tracker knows the Python type of the value it stands for, how to read its
attributes, call it, iterate over it, and (through ``codegen.reconstruct``)
how to rebuild the real value after the graph ran. ``source`` is the Python
expression, valid in the guard and transformed functions, that reads the
real value at call time; trackers without a source were created by the
frame itself.

Behaviour that needs the translator (graph ops, inlining) receives ``tx``.
"""

from __future__ import annotations

import collections.abc
import enum
import inspect
import operator
import types
from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture.guards import COST_TENSOR
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class VariableTracker:
    """Base class: by default nothing is supported and says so."""

    source: str | None = None

    def python_type(self) -> type:
        raise Unsupported(f"type of {self!r} is not known")

    def is_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        raise Unsupported(f"{self!r} is not a Python constant")

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        raise Unsupported(f"attribute {name!r} of {self.describe()}")

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(f"calling {self.describe()}")

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        return self.var_getattr(tx, name).call(tx, args, kwargs)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        raise Unsupported(f"iterating over {self.describe()}")

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        """``iter(self)``: by default over the items ``unpack`` gives now."""
        return IteratorVariable(self.unpack(tx))

    def truth(self, tx: Translator) -> bool:
        """Python's rule for an object whose type defines neither ``__bool__`` nor ``__len__``:
        true. Trackers that know their value override this; for the rest it can't be told
        without running Python, so the graph breaks."""
        try:
            cls = self.python_type()
        except Unsupported:
            raise Unsupported(f"bool() of {self.describe()}") from None
        if _defines_truth(cls):
            raise Unsupported(f"bool() of {self.describe()}: its type defines __bool__ or __len__")
        return True

    def describe(self) -> str:
        try:
            return f"a {self.python_type().__name__} value"
        except Unsupported:
            return type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}(source={self.source})"


class NullVariable(VariableTracker):
    """The NULL that 3.11+ pushes below a callable."""

    def __repr__(self) -> str:
        return "NULL"


NULL = NullVariable()

CONSTANT_TYPES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(Ellipsis),
    type(NotImplemented),
    torch.dtype,
    torch.device,
    torch.Size,
    torch.layout,
    torch.memory_format,
    range,
    slice,
    frozenset,
)

#: Immutable by design (slots, no setters): ``inspect.signature`` results and their parts.
IMMUTABLE_TYPES = (inspect.Signature, inspect.Parameter)


def is_constant_value(value: Any) -> bool:
    """Immutable Python values the translator can compute with at capture time."""
    if isinstance(value, (enum.Enum, *IMMUTABLE_TYPES)):
        return True
    if type(value) in CONSTANT_TYPES:
        if isinstance(value, (slice, frozenset)):
            parts = (value.start, value.stop, value.step) if isinstance(value, slice) else value
            return all(is_constant_value(p) for p in parts)
        return True
    if type(value) is tuple:
        return all(is_constant_value(v) for v in value)
    return False


class ConstantVariable(VariableTracker):
    """An immutable Python value (numbers, strings, None, dtypes, sizes, ranges...)."""

    def __init__(self, value: Any, source: str | None = None):
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"{type(self.value).__name__} has no attribute {name!r}") from e
        if is_constant_value(attr):
            return ConstantVariable(attr)
        if isinstance(attr, types.MappingProxyType) and isinstance(self.value, IMMUTABLE_TYPES):
            # ``Signature.parameters``: a read-only view that the immutable owner never changes
            source = f"{tx.output.guards.bind(self.value, 'const')}.{name}"
            return ReadOnlyDictVariable({k: ConstantVariable(v) for k, v in attr.items()}, source)
        if callable(attr):
            return BuiltinVariable(attr)
        raise Unsupported(f"attribute {name!r} of {type(self.value).__name__}")

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        try:
            return [ConstantVariable(v) for v in self.value]
        except TypeError as e:
            raise Unsupported(f"iterating over {type(self.value).__name__}") from e

    def truth(self, tx: Translator) -> bool:
        return bool(self.value)

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


class TensorVariable(VariableTracker):
    """A tensor: an FX node plus a fake tensor carrying its metadata; ``cls`` is the real
    tensor's class (``nn.Parameter`` for a parameter passed in: guarded with the input)."""

    def __init__(
        self,
        node: torch.fx.Node,
        example: torch.Tensor,
        source: str | None = None,
        cls: type = torch.Tensor,
    ):
        self.node = node
        self.example = example
        self.source = source
        self.cls = cls

    def python_type(self) -> type:
        return self.cls

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "__class__":
            return tx.output.wrap(self.cls, None)
        guard_tensor_state(tx, self, name)
        return tx.output.tensor_getattr(self, name)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        guard_tensor_state(tx, self, name)
        return tx.output.tensor_method(self, name, args, kwargs)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if self.example.dim() == 0:
            raise Unsupported("iterating over a 0-d tensor")
        return [
            tx.output.call_op("call_function", operator.getitem, [self, ConstantVariable(i)], {})
            for i in range(self.example.shape[0])
        ]

    def truth(self, tx: Translator) -> bool:
        raise Unsupported("data-dependent branch on a tensor value (bool(tensor))")

    def __repr__(self) -> str:
        return f"Tensor({self.node.name}, {tuple(self.example.shape)}, {self.example.dtype})"


#: Tensor facts that an input's guards (type, dtype, device, sizes, requires_grad) leave open,
#: by the attribute or method that reads them, and how to read them on the input.
TENSOR_STATE = {
    "is_inference": "is_inference()",
    "is_leaf": "is_leaf",
    "is_conj": "is_conj()",
    "is_neg": "is_neg()",
    "is_nested": "is_nested",
    "layout": "layout",
    "is_sparse": "layout",
    "is_sparse_csr": "layout",
    "is_mkldnn": "layout",
    "storage_offset": "storage_offset()",
}
#: The facts that strides decide, guarded on every input unless ``config.guard_strides`` is off.
TENSOR_STRIDE_STATE = {"stride", "is_contiguous", "is_non_overlapping_and_dense"}


def guard_tensor_state(tx: Translator, vt: TensorVariable, name: str) -> None:
    """Reading ``name`` on ``vt`` (e.g. ``is_inference()``) gives what the fake tensor says, which
    follows from the graph inputs ``vt`` was computed from: guard that fact on each of them."""
    from torchkiln import config

    read = TENSOR_STATE.get(name)
    if read is None and name in TENSOR_STRIDE_STATE and not config.guard_strides:
        read = "stride()"
    if read is None:
        return
    guards = tx.output.guards
    by_node = {node: (source, value) for source, value, node in tx.output.inputs}
    seen, stack = set(), [vt.node]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    for node in seen & by_node.keys():
        source, value = by_node[node]
        fact = getattr(value, read.removesuffix("()"))
        fact = fact() if read.endswith("()") else fact
        guards.add(
            f"{source}.{read} == {guards.literal(fact)}", COST_TENSOR, f"{source}.{read} == {fact}"
        )


class ContainerVariable(VariableTracker):
    """Shared behaviour of lists and tuples."""

    def __init__(self, items: list[VariableTracker], source: str | None = None):
        self.items = list(items)
        self.source = source

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return list(self.items)

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return SequenceIteratorVariable(self)

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def is_constant(self) -> bool:
        return all(i.is_constant() for i in self.items)

    def as_python_constant(self) -> Any:
        return self.python_type()(i.as_python_constant() for i in self.items)

    def getitem(self, tx: Translator, index: Any) -> VariableTracker:
        if isinstance(index, slice):
            return (
                type(self)(self.items[index])
                if type(self) is not TupleVariable
                else TupleVariable(self.items[index])
            )
        if isinstance(index, int):
            try:
                return self.items[index]
            except IndexError as e:
                raise Unsupported(f"index {index} out of range of a {self.describe()}") from e
        raise Unsupported(f"indexing a {self.describe()} with {type(index).__name__}")


class ListVariable(ContainerVariable):
    """A Python list; mutations of a list with a source are replayed after the graph."""

    def python_type(self) -> type:
        return list

    def is_constant(self) -> bool:
        return False

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        items = self.items
        if name in (
            "append",
            "extend",
            "insert",
            "pop",
            "clear",
            "reverse",
            "remove",
            "sort",
            "__setitem__",
        ):
            tx.output.side_effects.mutate(self)
        if name == "append":
            items.append(args[0])
        elif name == "extend":
            self.extend(tx, args[0])
        elif name == "insert":
            items.insert(args[0].as_python_constant(), args[1])
        elif name == "pop":
            index = args[0].as_python_constant() if args else -1
            return items.pop(index)
        elif name == "clear":
            items.clear()
        elif name == "reverse":
            items.reverse()
        elif name == "remove":
            value = args[0].as_python_constant()
            for i, item in enumerate(items):
                if item.is_constant() and item.as_python_constant() == value:
                    del items[i]
                    break
            else:
                raise Unsupported("list.remove of a value not found")
        elif name == "sort" and not kwargs:
            values = sorted(i.as_python_constant() for i in items)
            items[:] = [ConstantVariable(v) for v in values]
        elif name in ("index", "count", "copy", "__len__"):
            if name == "copy":
                return ListVariable(items)
            if name == "__len__":
                return ConstantVariable(len(items))
            values = [i.as_python_constant() for i in items]
            return ConstantVariable(getattr(values, name)(args[0].as_python_constant()))
        else:
            raise Unsupported(f"list.{name}")
        return ConstantVariable(None)

    def extend(self, tx: Translator, iterable: VariableTracker) -> None:
        """``list.extend``: a list or tuple is copied first; any other iterable is appended item
        by item, so an iterable that reads this list sees the items appended so far."""
        if isinstance(iterable, ContainerVariable):
            self.items.extend(iterable.items)
            return
        iterator = iterable.make_iterator(tx)
        while (item := iterator.next(tx)) is not None:
            self.items.append(item)


class TupleVariable(ContainerVariable):
    """A tuple, a namedtuple (``cls``) or a torch structseq such as ``torch.return_types.max``."""

    def __init__(
        self,
        items: list[VariableTracker],
        source: str | None = None,
        cls: type = tuple,
        fields: tuple[str, ...] | None = None,
    ):
        super().__init__(items, source)
        self.cls = cls
        self.fields = fields

    def python_type(self) -> type:
        return self.cls

    def as_python_constant(self) -> Any:
        if self.cls is not tuple:
            raise Unsupported(f"{self.cls.__name__} is not a Python constant")
        return super().as_python_constant()

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if self.fields and name in self.fields:
            return self.items[self.fields.index(name)]
        if name in ("index", "count", "_asdict", "_replace"):
            return BoundMethodVariable(self, name)
        raise Unsupported(f"attribute {name!r} of {self.cls.__name__}")

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name in ("index", "count"):
            values = [i.as_python_constant() for i in self.items]
            return ConstantVariable(getattr(values, name)(args[0].as_python_constant()))
        if name == "_asdict" and self.fields:
            return DictVariable(dict(zip(self.fields, self.items)))
        if name == "_replace" and self.fields:
            items = list(self.items)
            for key, value in kwargs.items():
                items[self.fields.index(key)] = value
            return TupleVariable(items, cls=self.cls, fields=self.fields)
        return super().call_method(tx, name, args, kwargs)


DICT_MUTATORS = ("__setitem__", "update", "pop", "setdefault", "clear", "popitem", "__delitem__")


class DictVariable(VariableTracker):
    """A dict with constant keys; mutations of a dict with a source are replayed."""

    def __init__(self, items: dict, source: str | None = None):
        self.items = dict(items)
        self.source = source

    def python_type(self) -> type:
        return dict

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return [ConstantVariable(k) for k in self.items]

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return DictIteratorVariable(self, "keys")

    def getitem(self, tx: Translator, key: Any) -> VariableTracker:
        try:
            return self.items[key]
        except KeyError as e:
            raise Unsupported(f"dict key {key!r} not found") from e
        except TypeError as e:
            raise Unsupported(f"unhashable dict key {key!r}") from e

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        items = self.items
        consts = [a.as_python_constant() if a.is_constant() else a for a in args[:1]]
        if name in DICT_MUTATORS:
            tx.output.side_effects.mutate(self)
        if name == "__setitem__":
            items[consts[0]] = args[1]
        elif name == "__delitem__":
            del items[consts[0]]
        elif name == "get":
            return items.get(consts[0], args[1] if len(args) > 1 else ConstantVariable(None))
        elif name in ("keys", "values", "items"):
            return DictViewVariable(self, name)
        elif name == "update":
            if args:
                other = args[0]
                if not isinstance(other, DictVariable):
                    raise Unsupported(f"dict.update with {other.describe()}")
                items.update(other.items)
            for key, value in kwargs.items():
                items[key] = value
        elif name == "pop":
            if consts[0] in items:
                return items.pop(consts[0])
            if len(args) > 1:
                return args[1]
            raise Unsupported(f"dict.pop of missing key {consts[0]!r}")
        elif name == "setdefault":
            return items.setdefault(consts[0], args[1] if len(args) > 1 else ConstantVariable(None))
        elif name == "clear":
            items.clear()
        elif name == "copy":
            return DictVariable(items)
        elif name == "__contains__":
            return ConstantVariable(consts[0] in items)
        elif name == "__len__":
            return ConstantVariable(len(items))
        else:
            raise Unsupported(f"dict.{name}")
        return ConstantVariable(None)


class ReadOnlyDictVariable(DictVariable):
    """A ``types.MappingProxyType`` of constants: read like a dict, writes refused as Python does.

    ``source`` reads the real proxy, so a rebuilt value is the proxy itself.
    """

    def python_type(self) -> type:
        return types.MappingProxyType

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name in DICT_MUTATORS:
            raise Unsupported(f"mappingproxy.{name} (a read-only mapping)")
        return super().call_method(tx, name, args, kwargs)


class SetVariable(VariableTracker):
    """A set of constants (its elements are tracked as Python values)."""

    def __init__(self, values: set, source: str | None = None):
        self.values = set(values)
        self.source = source

    def python_type(self) -> type:
        return set

    def truth(self, tx: Translator) -> bool:
        return bool(self.values)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return [ConstantVariable(v) for v in self.values]

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        consts = [a.as_python_constant() for a in args]
        if name in ("add", "discard", "remove", "update", "clear", "pop"):
            tx.output.side_effects.mutate(self)
        if name in ("add", "discard", "remove", "clear"):
            getattr(self.values, name)(*consts)
        elif name == "update":
            for c in consts:
                self.values.update(c)
        elif name in (
            "union",
            "intersection",
            "difference",
            "issubset",
            "issuperset",
            "__contains__",
        ):
            result = getattr(self.values, name)(*consts)
            return SetVariable(result) if isinstance(result, set) else ConstantVariable(result)
        else:
            raise Unsupported(f"set.{name}")
        return ConstantVariable(None)


class IteratorVariable(VariableTracker):
    """An iterator over items known when it was made (``reversed``, ``named_parameters()``...).

    The subclasses are lazy, as Python is: ``next`` runs what the real
    iterator's next step runs (reads a list as it is now, calls a ``map``'s
    function, resumes a generator), so side effects happen in Python's order.
    ``reconstruct`` rebuilds the real iterator, at its position, after the graph;
    ``remaining`` lists the items still to come where no code must run to know them
    (a graph break hands a live loop's iterator to the resume function as that list).
    """

    def __init__(self, items: list[VariableTracker]):
        self.items = items
        self.index = 0

    def truth(self, tx: Translator) -> bool:
        return True  # iterators define no ``__bool__`` or ``__len__``

    def python_type(self) -> type:
        return type(iter([]))

    def next(self, tx: Translator) -> VariableTracker | None:
        """The next item, or None when the iterator is exhausted."""
        if self.index >= len(self.items):
            return None
        self.index += 1
        return self.items[self.index - 1]

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return self

    def remaining(self) -> list[VariableTracker]:
        return self.items[self.index :]

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        items = []
        while (item := self.next(tx)) is not None:
            items.append(item)
        return items

    def reconstruct(self, codegen: Any) -> str:
        return f"iter([{', '.join(codegen.reconstruct(i) for i in self.remaining())}])"


def _iterator_at(codegen: Any, iterable: str, index: int) -> str:
    from torchkiln.capture.runtime import iterator_at

    return f"{codegen.bind(iterator_at, 'iterator_at')}({iterable}, {index})"


class SequenceIteratorVariable(IteratorVariable):
    """``iter(list)`` / ``iter(tuple)``: reads the sequence at each step, so it sees items
    appended meanwhile (``for x in lst: lst.append(...)``), and stops for good once exhausted."""

    def __init__(self, seq: ContainerVariable):
        self.seq: ContainerVariable | None = seq
        self.index = 0
        self.cls = type(iter([] if isinstance(seq, ListVariable) else ()))

    def python_type(self) -> type:
        return self.cls

    def next(self, tx: Translator) -> VariableTracker | None:
        if self.seq is None or self.index >= len(self.seq.items):
            self.seq = None
            return None
        self.index += 1
        return self.seq.items[self.index - 1]

    def remaining(self) -> list[VariableTracker]:
        return [] if self.seq is None else self.seq.items[self.index :]

    def reconstruct(self, codegen: Any) -> str:
        if self.seq is None:  # exhausted for good, whatever the sequence does later
            return "iter([])" if self.cls is type(iter([])) else "iter(())"
        return _iterator_at(codegen, codegen.reconstruct(self.seq), self.index)


def _dict_entries(mapping: DictVariable, kind: str) -> list[VariableTracker]:
    """What iterating ``mapping.<kind>()`` gives now."""
    if kind == "keys":
        return [ConstantVariable(k) for k in mapping.items]
    if kind == "values":
        return list(mapping.items.values())
    return [TupleVariable([ConstantVariable(k), v]) for k, v in mapping.items.items()]


class DictViewVariable(VariableTracker):
    """``d.keys()`` / ``d.values()`` / ``d.items()``: a live view, read when it is used."""

    def __init__(self, mapping: DictVariable, kind: str):
        self.mapping = mapping
        self.kind = kind

    def python_type(self) -> type:
        return type(getattr({}, self.kind)())

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return _dict_entries(self.mapping, self.kind)

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return DictIteratorVariable(self.mapping, self.kind)

    def truth(self, tx: Translator) -> bool:
        return bool(self.mapping.items)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "__len__" and not args:
            return ConstantVariable(len(self.mapping.items))
        raise Unsupported(f"{self.python_type().__name__}.{name}")

    def reconstruct(self, codegen: Any) -> str:
        return f"{codegen.reconstruct(self.mapping)}.{self.kind}()"


class DictIteratorVariable(IteratorVariable):
    """An iterator over a dict or one of its views; the dict's keys must not change meanwhile."""

    def __init__(self, mapping: DictVariable, kind: str):
        self.mapping = mapping
        self.kind = kind
        self.keys = list(mapping.items)
        self.index = 0

    def python_type(self) -> type:
        return type(iter(getattr({}, self.kind)()))

    def _check_keys(self) -> None:
        if list(self.mapping.items) != self.keys:
            raise Unsupported("a dict changed size (or keys) while an iterator over it was live")

    def next(self, tx: Translator) -> VariableTracker | None:
        self._check_keys()
        if self.index >= len(self.keys):
            return None
        key = self.keys[self.index]
        self.index += 1
        return self._entry(key)

    def _entry(self, key: Any) -> VariableTracker:
        value = self.mapping.items[key]
        if self.kind == "keys":
            return ConstantVariable(key)
        return value if self.kind == "values" else TupleVariable([ConstantVariable(key), value])

    def remaining(self) -> list[VariableTracker]:
        self._check_keys()
        return [self._entry(key) for key in self.keys[self.index :]]

    def reconstruct(self, codegen: Any) -> str:
        self._check_keys()
        view = f"{codegen.reconstruct(self.mapping)}.{self.kind}()"
        return _iterator_at(codegen, view, self.index)


class MapVariable(IteratorVariable):
    """``map(fn, *iterables)``: ``fn`` runs when an item is asked for."""

    def __init__(self, fn: VariableTracker, iterators: list[IteratorVariable]):
        self.fn = fn
        self.iterators = iterators

    def python_type(self) -> type:
        return map

    def next(self, tx: Translator) -> VariableTracker | None:
        args = []
        for iterator in self.iterators:
            item = iterator.next(tx)
            if item is None:
                return None
            args.append(item)
        return tx.call_function(self.fn, args, {})

    def remaining(self) -> list[VariableTracker]:
        raise Unsupported("a map() left mid-iteration (its function has not run on the rest)")

    def reconstruct(self, codegen: Any) -> str:
        parts = [codegen.reconstruct(v) for v in (self.fn, *self.iterators)]
        return f"{codegen.bind(map, 'map')}({', '.join(parts)})"


class FilterVariable(IteratorVariable):
    """``filter(fn, iterable)``: ``fn`` (or truth, for None) runs when an item is asked for."""

    def __init__(self, fn: VariableTracker, iterator: IteratorVariable):
        self.fn = fn
        self.iterator = iterator

    def python_type(self) -> type:
        return filter

    def next(self, tx: Translator) -> VariableTracker | None:
        is_none = self.fn.is_constant() and self.fn.as_python_constant() is None
        while (item := self.iterator.next(tx)) is not None:
            keep = item if is_none else tx.call_function(self.fn, [item], {})
            if keep.truth(tx):
                return item
        return None

    def remaining(self) -> list[VariableTracker]:
        raise Unsupported("a filter() left mid-iteration (its test has not run on the rest)")

    def reconstruct(self, codegen: Any) -> str:
        parts = [codegen.reconstruct(self.fn), codegen.reconstruct(self.iterator)]
        return f"{codegen.bind(filter, 'filter')}({', '.join(parts)})"


class ZipVariable(IteratorVariable):
    """``zip(*iterables, strict=...)``: advances each iterable in turn, stops at the shortest."""

    def __init__(self, iterators: list[IteratorVariable], strict: bool):
        self.iterators = iterators
        self.strict = strict

    def python_type(self) -> type:
        return zip

    def next(self, tx: Translator) -> VariableTracker | None:
        items = []
        for iterator in self.iterators:
            item = iterator.next(tx)
            if item is None:
                if self.strict:
                    self._check_all_exhausted(tx, items)
                return None
            items.append(item)
        return TupleVariable(items) if items else None

    def _check_all_exhausted(self, tx: Translator, items: list) -> None:
        """``strict=True``: the first iterable ended; the others must end with it."""
        if items or any(i.next(tx) is not None for i in self.iterators[1:]):
            raise Unsupported("zip(strict=True) over iterables of different lengths")

    def remaining(self) -> list[VariableTracker]:
        lists = [iterator.remaining() for iterator in self.iterators]
        if self.strict and len({len(items) for items in lists}) > 1:
            raise Unsupported("zip(strict=True) over iterables of different lengths")
        return [TupleVariable(list(group)) for group in zip(*lists)]

    def reconstruct(self, codegen: Any) -> str:
        parts = [codegen.reconstruct(i) for i in self.iterators]
        if self.strict:
            parts.append("strict=True")
        return f"{codegen.bind(zip, 'zip')}({', '.join(parts)})"


class EnumerateVariable(IteratorVariable):
    """``enumerate(iterable, start)``."""

    def __init__(self, iterator: IteratorVariable, count: int):
        self.iterator = iterator
        self.count = count

    def python_type(self) -> type:
        return enumerate

    def next(self, tx: Translator) -> VariableTracker | None:
        item = self.iterator.next(tx)
        if item is None:
            return None
        self.count += 1
        return TupleVariable([ConstantVariable(self.count - 1), item])

    def remaining(self) -> list[VariableTracker]:
        items = self.iterator.remaining()
        return [TupleVariable([ConstantVariable(self.count + i), v]) for i, v in enumerate(items)]

    def reconstruct(self, codegen: Any) -> str:
        inner = codegen.reconstruct(self.iterator)
        return f"{codegen.bind(enumerate, 'enumerate')}({inner}, {self.count})"


class GeneratorVariable(IteratorVariable):
    """A generator the frame created: its code runs (in ``translator``) up to the next
    ``yield`` each time an item is asked for, as Python runs it."""

    def __init__(self, translator: Translator):
        self.translator = translator

    def python_type(self) -> type:
        return types.GeneratorType

    def next(self, tx: Translator) -> VariableTracker | None:
        return self.translator.resume_generator()

    def remaining(self) -> list[VariableTracker]:
        raise Unsupported("a generator left mid-run (its code has not run on the rest)")

    def reconstruct(self, codegen: Any) -> str:
        raise Unsupported("cannot rebuild a generator the frame created (its code is mid-run)")


class SliceVariable(VariableTracker):
    """A slice whose bounds are not all constants (e.g. computed from tensors)."""

    def __init__(self, parts: list[VariableTracker]):
        self.parts = parts

    def python_type(self) -> type:
        return slice


class CellVariable(VariableTracker):
    """A cell created by the frame (``MAKE_CELL``), shared with nested functions."""

    def __init__(self, contents: VariableTracker | None = None):
        self.contents = contents


class BoundMethodVariable(VariableTracker):
    """``obj.name`` looked up for a call: the call goes to ``obj.call_method``."""

    def __init__(self, obj: VariableTracker, name: str):
        self.obj = obj
        self.name = name

    def python_type(self) -> type:
        return types.MethodType

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def describe(self) -> str:
        return f"method {self.name!r} of {self.obj.describe()}"


class ValueVariable(VariableTracker):
    """A real Python object held by identity (guarded with ``is`` when it has a source)."""

    def __init__(self, value: Any, source: str | None = None):
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        name = getattr(self.value, "__qualname__", None) or type(self.value).__name__
        return f"{type(self).__name__.removesuffix('Variable').lower()} {name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class BuiltinVariable(ValueVariable):
    """A builtin, ``math``/``operator`` function or a method of a constant: see ``builtins.py``."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        from torchkiln.capture.builtins import call_builtin

        return call_builtin(tx, self.value, args, kwargs)


class OpaqueVariable(ValueVariable):
    """An object torchkiln passes around but cannot look into (C functions, numpy arrays, loggers).

    Calling it, or a method of it, is ``Unsupported`` (a graph break that
    runs the call natively); only its type is guarded.
    """

    def describe(self) -> str:
        name = getattr(self.value, "__qualname__", None) or type(self.value).__name__
        module = getattr(self.value, "__module__", None) or type(self.value).__module__
        return f"{module}.{name}"

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(f"calling {self.describe()} (C function or untraceable callable)")

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        class_attr = _class_lookup(type(self.value), name)
        if is_pure_lookup(class_attr):  # ``os.environ.get(key)``: a guard re-runs the lookup
            return LookupVariable(class_attr, self)
        return OpaqueAttributeVariable(self, name)


class TorchScriptVariable(OpaqueVariable):
    """A ``torch.jit`` module, method or function kept without its Python source."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(
            f"calling TorchScript {type(self.value).__name__}: it runs in the TorchScript "
            "runtime, not in Python, so it is called natively; compile the original Python "
            "module or function to trace it"
        )


class OpaqueAttributeVariable(VariableTracker):
    """``opaque.name``: rebuilt as that expression when a graph break needs it."""

    def __init__(self, obj: OpaqueVariable, name: str):
        self.obj = obj
        self.name = name

    def describe(self) -> str:
        return f"{type(self.obj.value).__qualname__}.{self.name}"

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        raise Unsupported(
            f"calling {self.describe()} of a {type(self.obj.value).__module__} object (not traced)"
        )


class TorchFunctionVariable(ValueVariable):
    """A torch callable: calling it on tensors adds a node to the graph."""

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        from torchkiln.capture.torch_functions import call_torch_function

        return call_torch_function(tx, self.value, args, kwargs)

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        return tx.output.wrap(getattr(self.value, name), None)


class PythonModuleVariable(ValueVariable):
    """A Python module (``torch``, ``math``, a user module): attributes are read through."""

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        try:
            value = getattr(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"module {self.value.__name__} has no attribute {name!r}") from e
        if _is_torch_module(self.value) or self.value.__name__ in ("math", "operator", "builtins"):
            return tx.output.wrap(value, None)
        return tx.output.wrap(value, f"{self.source}.{name}" if self.source else None)


def _is_torch_module(module: types.ModuleType) -> bool:
    return module.__name__ == "torch" or module.__name__.startswith("torch.")


class UserFunctionVariable(ValueVariable):
    """A user Python function: calls are inlined into the graph being built.

    A few standard-library functions are not inlined but modelled
    (``builtins.PYTHON_FUNCTIONS``), ``inspect.signature`` for one.
    """

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        from torchkiln.capture.builtins import PYTHON_FUNCTIONS

        handler = PYTHON_FUNCTIONS.get(self.value)
        if handler is not None:
            return handler(tx, *args, **kwargs)
        return tx.inline_call(self.value, args, kwargs)

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.value, name))
        if name == "__code__":  # read for its signature (co_varnames, co_argcount...)
            code = self.value.__code__
            if self.source:
                tx.output.guards.identity(f"{self.source}.__code__", code)
            return ConstantVariable(code)
        raise Unsupported(f"attribute {name!r} of function {self.value.__qualname__}")


class NestedFunctionVariable(VariableTracker):
    """A function created by ``MAKE_FUNCTION`` inside the frame (closures, lambdas, comprehensions)."""

    def __init__(
        self,
        code: types.CodeType,
        defaults: tuple | None,
        kwdefaults: dict | None,
        closure: tuple | None,
        globals_: dict,
    ):
        self.code = code
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.closure = closure
        self.globals = globals_

    def python_type(self) -> type:
        return types.FunctionType

    def describe(self) -> str:
        return f"nested function {self.code.co_name}"

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return tx.inline_nested(self, args, kwargs)

    def reconstruct(self, codegen: Any) -> str:
        """A new function object over the same code. Not for a closure over the frame's own
        cells: the rebuilt cells would not be the ones the frame (or a resume function) uses."""
        from torchkiln.capture.runtime import make_function
        from torchkiln.capture.translator import RealCellVariable

        if not codegen.rebuilds_functions:
            raise Unsupported(f"cannot pass {self.describe()} to a resume function")
        cells = []
        for cell in self.closure or ():
            if not isinstance(cell, RealCellVariable):
                raise Unsupported(f"cannot rebuild {self.describe()}: it closes over frame locals")
            cells.append(cell.source.removesuffix(".cell_contents"))
        defaults = "".join(f"{codegen.reconstruct(d)}, " for d in self.defaults or ())
        kwdefaults = ", ".join(
            f"{k!r}: {codegen.reconstruct(v)}" for k, v in (self.kwdefaults or {}).items()
        )
        parts = [
            codegen.bind(self.code, "code"),
            codegen.bind(self.globals, "G"),
            f"({defaults})",
            f"{{{kwdefaults}}}",
            f"({''.join(f'{c}, ' for c in cells)})",
        ]
        return f"{codegen.bind(make_function, 'make_function')}({', '.join(parts)})"


class UserMethodVariable(VariableTracker):
    """A user function bound to a tracked ``self``."""

    def __init__(self, fn: Any, obj: VariableTracker):
        self.fn = fn
        self.obj = obj

    def python_type(self) -> type:
        return types.MethodType

    def describe(self) -> str:
        return f"method {getattr(self.fn, '__qualname__', self.fn)}"

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if isinstance(self.fn, types.FunctionType):
            return tx.inline_call(self.fn, [self.obj, *args], kwargs)
        return tx.output.wrap(self.fn, None).call(tx, [self.obj, *args], kwargs)


class PartialVariable(VariableTracker):
    """``functools.partial(func, *args, **kwargs)``."""

    def __init__(self, func: VariableTracker, args: list, kwargs: dict, source: str | None = None):
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.source = source

    def python_type(self) -> type:
        import functools

        return functools.partial

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return self.func.call(tx, [*self.args, *args], {**self.kwargs, **kwargs})


class ClassVariable(ValueVariable):
    """A class: calling builds namedtuples, dataclasses and known torch objects."""

    def as_python_constant(self) -> Any:
        return self.value  # held by identity, so ``str(cls)`` and the like fold

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        from torchkiln.capture.builtins import construct_class

        return construct_class(tx, self.value, args, kwargs)

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        try:
            value = (
                self.value.__dict__[name]
                if name in self.value.__dict__
                else getattr(self.value, name)
            )
        except AttributeError as e:
            raise Unsupported(f"class {self.value.__name__} has no attribute {name!r}") from e
        if isinstance(value, staticmethod):
            value = value.__func__
        elif isinstance(value, classmethod):
            return UserMethodVariable(value.__func__, self)
        return tx.output.wrap(value, f"{self.source}.{name}" if self.source else None)


class UserObjectVariable(ValueVariable):
    """An instance of a user class. ``value`` is None for a dataclass built by the frame."""

    def __init__(
        self,
        value: Any,
        source: str | None = None,
        cls: type | None = None,
        attrs: dict | None = None,
    ):
        super().__init__(value, source)
        self.cls = cls if cls is not None else type(value)
        self.attrs: dict[str, VariableTracker] = dict(attrs or {})

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"{self.cls.__name__} object"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in self.attrs:
            return self.attrs[name]
        class_attr = _class_lookup(self.cls, name)
        if isinstance(class_attr, property):
            return tx.output.wrap(class_attr.fget, None).call(tx, [self], {})
        if self.value is not None and name in getattr(self.value, "__dict__", {}):
            return tx.output.wrap(
                self.value.__dict__[name], f"{self.source}.{name}" if self.source else None
            )
        if self.value is not None and isinstance(
            class_attr, (types.FunctionType, staticmethod, classmethod)
        ):
            tx.output.guard_class_member(self, name)
        if binds_to_real_object(class_attr):  # first: the ``Mapping`` mixins are functions too
            return method_of_real_object(tx, class_attr, self)
        if isinstance(class_attr, types.FunctionType):
            return UserMethodVariable(class_attr, self)
        if isinstance(class_attr, staticmethod):
            return tx.output.wrap(class_attr.__func__, None)
        if isinstance(class_attr, classmethod):
            return UserMethodVariable(class_attr.__func__, ClassVariable(self.cls))
        if class_attr is not _MISSING:
            if hasattr(class_attr, "__get__"):  # slots, cached_property...: read natively
                raise Unsupported(f"{self.describe()}.{name} is a {type(class_attr).__name__}")
            # read through the instance: an instance attribute set later, or a class
            # attribute changed, is then seen by the guards
            source = f"{self.source}.{name}" if self.source and self.value is not None else None
            return tx.output.wrap(class_attr, source)
        if self.source:
            tx.output.guards.add(
                f"not hasattr({self.source}, {name!r})", 2, f"{self.source} has no {name!r}"
            )
        raise Unsupported(f"{self.describe()} has no attribute {name!r}")

    def truth(self, tx: Translator) -> bool:
        """``bool(obj)`` as Python computes it: ``__bool__``, else ``__len__``, else true."""
        for name in ("__bool__", "__len__"):
            if _class_lookup(self.cls, name) is not _MISSING:
                return tx.truth(tx.call_function(tx.getattr(self, name), [], {}))
        return True

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        call = _class_lookup(self.cls, "__call__")
        if not isinstance(call, types.FunctionType):
            raise Unsupported(f"calling {self.describe()}")
        return tx.inline_call(call, [self, *args], kwargs)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        if self.value is not None:
            tx.output.side_effects.store_attr(self, name, value)
        self.attrs[name] = value


_MISSING = object()


def _class_lookup(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


def _defines_truth(cls: type) -> bool:
    """Whether ``bool()`` of an instance runs the class's ``__bool__`` or ``__len__``."""
    return any(_class_lookup(cls, name) is not _MISSING for name in ("__bool__", "__len__"))


#: containers whose length is their number of children (a module's children are guarded)
_CHILD_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


class NNModuleVariable(ValueVariable):
    """An ``nn.Module`` guarded by type and ``training`` (``GuardSet.module``); calls inline
    ``forward``."""

    def __init__(self, value: torch.nn.Module, source: str | None = None):
        super().__init__(value, source)
        self.attrs: dict[str, VariableTracker] = {}

    def describe(self) -> str:
        return f"module {type(self.value).__name__}"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        return tx.output.module_getattr(self, name, tx)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        tx.output.side_effects.store_attr(self, name, value)
        self.attrs[name] = value

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        return tx.output.call_module(tx, self, args, kwargs)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        from torchkiln.capture.output_graph import MODULE_MEMBER_METHODS

        if name in MODULE_MEMBER_METHODS and name not in self.value.__dict__:
            return tx.output.module_members(self, name, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return tx.output.module_children(self)

    def truth(self, tx: Translator) -> bool:
        cls = type(self.value)
        len_fn = _class_lookup(cls, "__len__")
        if _class_lookup(cls, "__bool__") is _MISSING and any(
            len_fn is c.__len__ for c in _CHILD_CONTAINERS
        ):
            return bool(self.unpack(tx))
        return super().truth(tx)


class GradModeVariable(VariableTracker):
    """``torch.no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(b)`` as a context manager."""

    def __init__(self, mode: bool, prev: bool | None = None):
        self.mode = mode
        self.prev = prev  # set when the mode is already applied (set_grad_enabled)

    def python_type(self) -> type:
        if self.prev is not None:
            return torch.set_grad_enabled
        return torch.enable_grad if self.mode else torch.no_grad

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """``__class__`` and ``mode``: what ``clone()`` reads when ``@torch.no_grad()`` runs."""
        if name == "__class__":
            return tx.output.wrap(self.python_type(), None)
        if name == "mode" and self.prev is not None:
            return ConstantVariable(self.mode)
        return super().var_getattr(tx, name)

    def enter(self, tx: Translator) -> VariableTracker:
        prev = self.prev if self.prev is not None else tx.output.grad_enabled
        tx.output.set_grad_enabled(self.mode)
        return GradModeExitVariable(prev)

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        if len(args) == 1 and isinstance(args[0], (UserFunctionVariable, NestedFunctionVariable)):
            return GradModeDecoratedVariable(self.mode, args[0])
        raise Unsupported("calling a grad-mode context object")


class GradModeDecoratedVariable(VariableTracker):
    """A function decorated with ``@torch.no_grad()`` and friends."""

    def __init__(self, mode: bool, fn: VariableTracker):
        self.mode = mode
        self.fn = fn

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        prev = tx.output.grad_enabled
        tx.output.set_grad_enabled(self.mode)
        result = self.fn.call(tx, args, kwargs)
        tx.output.set_grad_enabled(prev)
        return result


class GradModeExitVariable(VariableTracker):
    """The ``__exit__`` a grad-mode ``with`` block leaves on the stack: restores ``prev``."""

    def __init__(self, prev: bool):
        self.prev = prev

    def python_type(self) -> type:
        from torchkiln.capture.runtime import GradModeRestore

        return GradModeRestore

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        tx.output.set_grad_enabled(self.prev)
        return ConstantVariable(None)


#: Methods that only read a mapping: on a real object they are answered at capture time.
PURE_LOOKUPS = (
    dict.get,
    dict.__getitem__,
    dict.__contains__,
    collections.abc.Mapping.get,
    collections.abc.Mapping.__contains__,
)
#: The ``collections.abc`` mixins among them: they read the mapping through its ``__getitem__``.
_MAPPING_MIXINS = (collections.abc.Mapping.get, collections.abc.Mapping.__contains__)
_C_METHODS = (types.MethodDescriptorType, types.WrapperDescriptorType)


def is_pure_lookup(attr: Any) -> bool:
    return any(attr is lookup for lookup in PURE_LOOKUPS)  # identity: attr may define __eq__


def binds_to_real_object(attr: Any) -> bool:
    """A class attribute that ``method_of_real_object`` handles: a C method or a pure lookup."""
    return is_pure_lookup(attr) or isinstance(attr, _C_METHODS)


def literal_repr(vt: VariableTracker) -> str | None:
    """The source text of a constant whose ``repr`` reads back as itself, else None."""
    if not vt.is_constant():
        return None
    value = vt.as_python_constant()
    return repr(value) if type(value) in (str, int, bool, type(None)) else None


def method_of_real_object(tx: Translator, attr: Any, obj: VariableTracker) -> VariableTracker:
    """``attr`` (a C method, or a lookup of ``PURE_LOOKUPS``) bound to the real object behind
    ``obj``, as ``obj.name`` or ``super().name`` gives it."""
    if is_pure_lookup(attr):
        return LookupVariable(attr, obj)
    if not isinstance(obj, ValueVariable) or obj.value is None:
        raise Unsupported(f"{type(attr).__name__} {attr!r} of {obj.describe()}")
    return tx.output.wrap(attr.__get__(obj.value, type(obj.value)), None)


def _runs_user_code(cls: type, method: Any) -> Any:
    """The user function a lookup ``method`` on a ``cls`` instance would run, or None.

    The mixins call ``__getitem__`` and ``dict.__getitem__`` calls ``__missing__``;
    C code and standard-library code read only the mapping's own storage.
    """
    if method in _MAPPING_MIXINS:
        hook = "__getitem__"
    elif method is dict.__getitem__:
        hook = "__missing__"
    else:
        return None
    fn = _class_lookup(cls, hook)
    if isinstance(fn, types.FunctionType) and not _is_stdlib_module(fn.__module__):
        return fn
    return None


def _is_stdlib_module(module: str | None) -> bool:
    from torchkiln.capture.builder import is_stdlib

    return is_stdlib(module)


class LookupVariable(VariableTracker):
    """``mapping.get(key)`` and the like on a real mapping (a registry): looked up now.

    The result's source is the call itself, ``___lookup(L_self, 'key')``, so
    the guards that protect the result run the lookup again on every call,
    with keys that are literals or objects read through a source.

    The real object is in its state before the frame ran; the frame's pending
    changes (``side_effects``) are not applied yet. C and standard-library
    lookups read only the mapping's own storage, which the frame cannot change
    (a dict subclass's storage is only written natively), so they are exact at
    any point. A mixin over a user ``__getitem__`` could read anything: once
    the frame has changed something, that ``__getitem__`` is inlined instead
    (a missing key ends in a graph break).
    """

    def __init__(self, method: Any, obj: VariableTracker):
        self.method = method
        self.obj = obj

    def call(self, tx: Translator, args: list, kwargs: dict) -> VariableTracker:
        obj = self.obj
        if kwargs or not isinstance(obj, ValueVariable) or not args:
            raise Unsupported(f"calling {self.describe()} here")
        user_code = _runs_user_code(obj.python_type(), self.method)
        if user_code is not None and tx.output.side_effects.events:
            if self.method not in _MAPPING_MIXINS:  # ``__missing__`` runs only for a missing key
                raise Unsupported(f"calling {self.describe()} after the frame changed state")
            value = tx.inline_call(user_code, [obj, args[0]], {})
            return ConstantVariable(True) if self.method is _MAPPING_MIXINS[1] else value
        texts = [
            literal_repr(a) or (a.source if isinstance(a, ValueVariable) else None) for a in args
        ]
        if obj.value is None or obj.source is None or None in texts:
            raise Unsupported(f"calling {self.describe()} on values without a source")
        values = [a.as_python_constant() if a.is_constant() else a.value for a in args]
        try:
            result = self.method(obj.value, *values)
        except Exception as e:
            raise Unsupported(f"{self.describe()} raised {type(e).__name__}") from e
        method = tx.output.guards.bind(self.method, "lookup")
        return tx.output.wrap(result, f"{method}({', '.join([obj.source, *texts])})")

    def describe(self) -> str:
        return f"{getattr(self.method, '__qualname__', self.method)} of {self.obj.describe()}"


class SuperVariable(VariableTracker):
    """``super()`` (or ``super(cls, obj)``): attribute lookup starts after ``cls`` in the MRO."""

    def __init__(self, cls: type, obj: VariableTracker):
        self.cls = cls
        self.obj = obj

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        mro = self.obj.python_type().__mro__
        for klass in mro[mro.index(self.cls) + 1 :]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if binds_to_real_object(attr):
                    return method_of_real_object(tx, attr, self.obj)
                if isinstance(attr, types.FunctionType):
                    return UserMethodVariable(attr, self.obj)
                if isinstance(attr, staticmethod):
                    return tx.output.wrap(attr.__func__, None)
                if isinstance(attr, classmethod):
                    return UserMethodVariable(attr.__func__, ClassVariable(self.obj.python_type()))
                if attr is object.__init__:
                    return BuiltinVariable(_object_init)
                if hasattr(attr, "__get__"):
                    raise Unsupported(f"super().{name} is a {type(attr).__name__}")
                return tx.output.wrap(attr, None)
        raise Unsupported(f"super() has no attribute {name!r}")


def _object_init(*args: Any) -> None:
    """``object.__init__`` reached through ``super().__init__()``: nothing to do."""
