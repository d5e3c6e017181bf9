"""The ``collections`` containers: ``OrderedDict``, ``defaultdict``, ``Counter``, ``deque``.

The dict kinds are ``DictVariable``s that add their own methods, their own ``__missing__``
and their own rebuilt form. A ``Counter``'s counting methods run on a real ``Counter`` of
its (constant) counts. A ``deque`` is a sequence of its own: it equals no list or tuple.
"""

from __future__ import annotations

import collections
import operator
from typing import TYPE_CHECKING, Any

from torchkiln.capture.runtime import iterator_at
from torchkiln.capture.variables import constants, containers, sets
from torchkiln.capture.variables.base import IteratorVariable, VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class OrderedDictVariable(containers.DictVariable):
    """``collections.OrderedDict``: ``move_to_end``, ``popitem(last=)``."""

    def python_type(self) -> type:
        return collections.OrderedDict

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name not in ("move_to_end", "popitem"):
            return super().call_method(tx, name, args, kwargs)
        names = ("key", "last") if name == "move_to_end" else ("last",)
        options = {**dict(zip(names, args)), **kwargs}
        last = options.get("last", constants.ConstantVariable(True)).as_python_constant()
        items = self.items
        if name == "move_to_end":
            key = sets.key_of(options["key"], tx)
            if key not in items:
                self.missing_key(key)
            tx.output.side_effects.mutate(self)
            value = items.pop(key)
            rest = {} if last else items.copy()
            if not last:
                items.clear()
            items[key] = value
            items.update(rest)  # the dict itself changes: iterators over it see it
            return constants.ConstantVariable(None)
        if not items:
            raise Unsupported("popitem() of an empty OrderedDict (KeyError)")
        tx.output.side_effects.mutate(self)
        key = list(items)[-1 if last else 0]
        return containers.TupleVariable([sets.tracker_of(key), items.pop(key)])

    def copy(self) -> containers.DictVariable:
        return OrderedDictVariable(self.items)

    def reconstruct_literal(self, codegen: Any) -> str:
        cls = codegen.bind(collections.OrderedDict, "OrderedDict")
        return f"{cls}({super().reconstruct_literal(codegen)})"


class DefaultDictVariable(containers.DictVariable):
    """``collections.defaultdict(factory)``: a missing key is filled by calling ``factory``."""

    def __init__(self, factory: VariableTracker, items: dict, source: str | None = None):
        super().__init__(items, source)
        self.factory = factory

    def python_type(self) -> type:
        return collections.defaultdict

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "default_factory":
            return self.factory
        return super().var_getattr(tx, name)

    def missing(self, tx: Translator, key: Any) -> VariableTracker:
        if self.factory.is_constant() and self.factory.as_python_constant() is None:
            return super().missing(tx, key)
        value = tx.call_function(self.factory, [], {})
        tx.output.side_effects.mutate(self)
        self.items[key] = value
        return value

    def copy(self) -> containers.DictVariable:
        return DefaultDictVariable(self.factory, self.items)

    def reconstruct_literal(self, codegen: Any) -> str:
        cls = codegen.bind(collections.defaultdict, "defaultdict")
        factory = codegen.reconstruct(self.factory)
        return f"{cls}({factory}, {super().reconstruct_literal(codegen)})"


class CounterVariable(containers.DictVariable):
    """``collections.Counter``: a missing key counts 0; the counting methods and operators run
    on a real ``Counter`` of the counts, which must be constants."""

    #: Methods that change the counts (the rest only read them).
    MUTATORS = ("update", "subtract")

    def python_type(self) -> type:
        return collections.Counter

    def missing(self, tx: Translator, key: Any) -> VariableTracker:
        return constants.ConstantVariable(0)

    def real(self) -> collections.Counter:
        return collections.Counter({k: v.as_python_constant() for k, v in self.items.items()})

    def set_counts(self, counts: collections.Counter) -> None:
        self.items.clear()
        self.items.update({k: constants.ConstantVariable(v) for k, v in counts.items()})

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name not in (*self.MUTATORS, "most_common", "elements", "total"):
            return super().call_method(tx, name, args, kwargs)
        counts = self.real()
        try:
            result = getattr(counts, name)(*counting_args(tx, args), **const_kwargs(kwargs))
        except (TypeError, ValueError) as e:
            raise Unsupported(f"Counter.{name} raised {type(e).__name__}: {e}") from e
        if name in self.MUTATORS:
            tx.output.side_effects.mutate(self)
            self.set_counts(counts)
            return constants.ConstantVariable(None)
        if name == "elements":
            return IteratorVariable([constants.ConstantVariable(e) for e in result])
        return wrap_counts(result)

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        op = symbol.removesuffix("=")
        if not isinstance(other, CounterVariable) or op not in COUNTER_OPERATORS:
            return None
        a, b = (other, self) if reflected else (self, other)
        result = wrap_counts(COUNTER_OPERATORS[op](a.real(), b.real()))
        if symbol == op or reflected:
            return result
        tx.output.side_effects.mutate(self)  # ``c += d`` changes ``c`` in place
        self.set_counts(result.real())
        return self

    def copy(self) -> containers.DictVariable:
        return CounterVariable(self.items)

    def reconstruct_literal(self, codegen: Any) -> str:
        cls = codegen.bind(collections.Counter, "Counter")
        return f"{cls}({super().reconstruct_literal(codegen)})"


COUNTER_OPERATORS = {"+": operator.add, "-": operator.sub, "|": operator.or_, "&": operator.and_}


def counting_args(tx: Translator, args: list) -> list:
    """A Counter method's positional arguments as real values: a mapping of counts or the
    items of an iterable."""
    values = []
    for arg in args:
        if isinstance(arg, containers.DictVariable):
            values.append({k: v.as_python_constant() for k, v in arg.items.items()})
        elif arg.is_constant():
            values.append(arg.as_python_constant())
        else:
            values.append([item.as_python_constant() for item in tx.unpack_iterable(arg)])
    return values


def const_kwargs(kwargs: dict) -> dict:
    return {k: v.as_python_constant() for k, v in kwargs.items()}


def wrap_counts(result: Any) -> VariableTracker:
    if isinstance(result, collections.Counter):
        counter = CounterVariable({})
        counter.set_counts(result)
        return counter
    if isinstance(result, list):  # ``most_common``: (key, count) pairs
        return containers.ListVariable([constants.ConstantVariable(pair) for pair in result])
    return constants.ConstantVariable(result)


class DequeVariable(VariableTracker):
    """``collections.deque(iterable, maxlen)``: appends past ``maxlen`` drop from the other end."""

    def __init__(self, items: list, maxlen: int | None = None, source: str | None = None):
        self.items = list(items)
        self.maxlen = maxlen
        self.source = source
        self._trim(right=True)

    def python_type(self) -> type:
        return collections.deque

    def _trim(self, right: bool) -> None:
        """Drop items past ``maxlen``: from the left after an append on the right, and back."""
        if self.maxlen is not None and len(self.items) > self.maxlen:
            extra = len(self.items) - self.maxlen
            self.items = self.items[extra:] if right else self.items[: self.maxlen]

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "maxlen":
            return constants.ConstantVariable(self.maxlen)
        return containers.method_of(self, name)

    def truth(self, tx: Translator) -> bool:
        return bool(self.items)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return list(self.items)

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return DequeIteratorVariable(self)

    def getitem(self, tx: Translator, index: Any) -> VariableTracker:
        if not isinstance(index, int):
            raise Unsupported(f"indexing a deque with {type(index).__name__} (TypeError)")
        try:
            return self.items[index]
        except IndexError as e:
            raise Unsupported(f"deque index {index} out of range") from e

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        items = self.items
        arity = (0, 1) if name == "rotate" else (DEQUE_ARITY.get(name),)
        if kwargs or len(args) not in arity:
            raise Unsupported(f"deque.{name} with these arguments")
        if name in DEQUE_READERS:
            return DEQUE_READERS[name](tx, self, *args)
        tx.output.side_effects.mutate(self)
        if name in ("append", "appendleft"):
            items.insert(len(items) if name == "append" else 0, args[0])
            self._trim(right=name == "append")
        elif name in ("extend", "extendleft"):
            for item in tx.unpack_iterable(args[0]):
                items.insert(len(items) if name == "extend" else 0, item)
                self._trim(right=name == "extend")
        elif name in ("pop", "popleft"):
            if not items:
                raise Unsupported(f"{name}() of an empty deque (IndexError)")
            return items.pop(-1 if name == "pop" else 0)
        elif name == "rotate":
            n = args[0].as_python_constant() if args else 1
            if not isinstance(n, int):
                raise Unsupported("deque.rotate of a non-int (TypeError)")
            if items:
                n %= len(items)
                self.items = items[-n:] + items[:-n] if n else items
        elif name == "insert":
            if self.maxlen is not None and len(items) >= self.maxlen:
                raise Unsupported("insert into a full deque (IndexError)")
            items.insert(args[0].as_python_constant(), args[1])
        elif name == "remove":
            for i, item in enumerate(items):
                if tx.item_equals(item, args[0]):
                    del items[i]
                    break
            else:
                raise Unsupported("deque.remove of a value not found (ValueError)")
        elif name == "__setitem__":
            index = args[0].as_python_constant()
            if not isinstance(index, int) or not -len(items) <= index < len(items):
                raise Unsupported(f"deque index {index!r} out of range or not an int")
            items[index] = args[1]
        else:  # clear, reverse
            getattr(items, name)()
        return constants.ConstantVariable(None)

    def reconstruct_literal(self, codegen: Any) -> str:
        cls = codegen.bind(collections.deque, "deque")
        return f"{cls}([{', '.join(codegen.reconstruct(i) for i in self.items)}], {self.maxlen!r})"

    def reconstruct(self, codegen: Any) -> str:
        return self.reconstruct_literal(codegen)

    def write_back(self, codegen: Any, new: str) -> list[str]:
        return [f"{self.source}.clear()", f"{self.source}.extend({new})"]


#: How many positional arguments each modelled deque method takes (``rotate``: 0 or 1).
DEQUE_ARITY = {
    "append": 1, "appendleft": 1, "extend": 1, "extendleft": 1, "pop": 0, "popleft": 0,
    "insert": 2, "remove": 1, "clear": 0, "reverse": 0, "__setitem__": 2,
    "__len__": 0, "__getitem__": 1, "__iter__": 0, "copy": 0, "count": 1, "index": 1,
}  # fmt: skip

DEQUE_READERS = {
    "__len__": lambda tx, dq: constants.ConstantVariable(len(dq.items)),
    "__getitem__": lambda tx, dq, index: dq.getitem(tx, index.as_python_constant()),
    "__iter__": lambda tx, dq: dq.make_iterator(tx),
    "copy": lambda tx, dq: DequeVariable(dq.items, dq.maxlen),
    "count": lambda tx, dq, x: constants.ConstantVariable(
        sum(tx.item_equals(item, x) for item in dq.items)
    ),
    "index": lambda tx, dq, x: _index(tx, dq, x),
}


def _index(tx: Translator, dq: DequeVariable, x: VariableTracker) -> VariableTracker:
    for i, item in enumerate(dq.items):
        if tx.item_equals(item, x):
            return constants.ConstantVariable(i)
    raise Unsupported("deque.index of a value not found (ValueError)")


class DequeIteratorVariable(IteratorVariable):
    """``iter(deque)``: Python stops such an iterator with an error if the deque changes."""

    def __init__(self, deque: DequeVariable):
        self.deque = deque
        self.snapshot = list(deque.items)
        self.index = 0

    def python_type(self) -> type:
        return type(iter(collections.deque()))

    def _check(self) -> None:
        if self.deque.items != self.snapshot:
            raise Unsupported("a deque changed while an iterator over it was live (RuntimeError)")

    def next(self, tx: Translator) -> VariableTracker | None:
        self._check()
        if self.index >= len(self.snapshot):
            return None
        self.index += 1
        return self.snapshot[self.index - 1]

    def remaining(self) -> list[VariableTracker]:
        self._check()
        return self.snapshot[self.index :]

    def reconstruct(self, codegen: Any) -> str:
        self._check()
        deque = codegen.reconstruct(self.deque)
        return f"{codegen.bind(iterator_at, 'iterator_at')}({deque}, {self.index})"


def storage_for(native: type) -> type:
    """The tracker class for the items of an object whose C dict type is ``native``."""
    return OrderedDictVariable if native is collections.OrderedDict else containers.DictVariable


def _ordered_dict(
    tx: Translator, arg: VariableTracker | None = None, **kwargs: VariableTracker
) -> VariableTracker:
    return OrderedDictVariable(_dict_items(tx, arg, kwargs))


def _defaultdict(
    tx: Translator,
    factory: VariableTracker | None = None,
    arg: VariableTracker | None = None,
    **kwargs: VariableTracker,
) -> VariableTracker:
    factory = factory if factory is not None else constants.ConstantVariable(None)
    return DefaultDictVariable(factory, _dict_items(tx, arg, kwargs))


def _counter(
    tx: Translator, arg: VariableTracker | None = None, **kwargs: VariableTracker
) -> VariableTracker:
    counter = CounterVariable({})
    counts = collections.Counter(*counting_args(tx, [arg] if arg is not None else []))
    counts.update(const_kwargs(kwargs))
    counter.set_counts(counts)
    return counter


def _deque(
    tx: Translator, iterable: VariableTracker | None = None, maxlen: VariableTracker | None = None
) -> VariableTracker:
    items = tx.unpack_iterable(iterable) if iterable is not None else []
    return DequeVariable(items, maxlen.as_python_constant() if maxlen is not None else None)


def _dict_items(tx: Translator, arg: VariableTracker | None, kwargs: dict) -> dict:
    """The items ``dict(arg, **kwargs)`` would hold."""
    return tx.call_function(tx.output.wrap(dict, None), [arg] if arg else [], kwargs).items


#: ``collections`` classes built by the frame.
CONSTRUCTORS = {
    collections.OrderedDict: _ordered_dict,
    collections.defaultdict: _defaultdict,
    collections.Counter: _counter,
    collections.deque: _deque,
}


def _namedtuple(
    tx: Translator, typename: VariableTracker, field_names: VariableTracker, **options: Any
) -> VariableTracker:
    """``namedtuple(...)`` in the frame: the class is made once, when the frame is captured,
    in the module of the code that asked for it (as Python names it)."""
    options = const_kwargs(options)
    options.setdefault("module", tx.f_globals.get("__name__"))
    fields = (
        field_names.as_python_constant()
        if field_names.is_constant()
        else [f.as_python_constant() for f in tx.unpack_iterable(field_names)]
    )
    try:
        cls = collections.namedtuple(typename.as_python_constant(), fields, **options)
    except (TypeError, ValueError) as e:
        raise Unsupported(f"namedtuple() raised {type(e).__name__}: {e}") from e
    return tx.output.wrap(cls, None)


#: ``collections`` functions modelled instead of inlined (the standard library is not traced).
PYTHON_FUNCTIONS = {collections.namedtuple: _namedtuple}
