"""Iterators over lists, tuples and dicts, ``map``/``filter``/``zip``/``enumerate``/generators
and user objects with a Python ``__next__``.

Lazy, as Python is: ``next`` runs what the real iterator's next step runs. The
base class, ``IteratorVariable``, is in ``base``.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture import bytecode_compat as bc
from torchkiln.capture.runtime import iterator_at
from torchkiln.capture.variables import constants, containers, exceptions, functions, sets
from torchkiln.capture.variables.base import IteratorVariable, VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


def _iterator_at(codegen: Any, iterable: str, index: int) -> str:
    return f"{codegen.bind(iterator_at, 'iterator_at')}({iterable}, {index})"


class SequenceIteratorVariable(IteratorVariable):
    """``iter(list)`` / ``iter(tuple)``: reads the sequence at each step, so it sees items
    appended meanwhile (``for x in lst: lst.append(...)``), and stops for good once exhausted."""

    def __init__(self, seq: containers.ContainerVariable):
        self.seq: containers.ContainerVariable | None = seq
        self.index = 0
        self.cls = type(iter([] if isinstance(seq, containers.ListVariable) else ()))

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


class DictIteratorVariable(IteratorVariable):
    """An iterator over a dict or one of its views; the dict's keys must not change meanwhile."""

    def __init__(self, mapping: containers.DictVariable, kind: str):
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
            return sets.tracker_of(key)
        return (
            value
            if self.kind == "values"
            else containers.TupleVariable([sets.tracker_of(key), value])
        )

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
        return containers.TupleVariable(items) if items else None

    def _check_all_exhausted(self, tx: Translator, items: list) -> None:
        """``strict=True``: the first iterable ended; the others must end with it."""
        if items or any(i.next(tx) is not None for i in self.iterators[1:]):
            raise Unsupported("zip(strict=True) over iterables of different lengths")

    def remaining(self) -> list[VariableTracker]:
        lists = [iterator.remaining() for iterator in self.iterators]
        if self.strict and len({len(items) for items in lists}) > 1:
            raise Unsupported("zip(strict=True) over iterables of different lengths")
        return [containers.TupleVariable(list(group)) for group in zip(*lists)]

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
        return containers.TupleVariable([constants.ConstantVariable(self.count - 1), item])

    def remaining(self) -> list[VariableTracker]:
        items = self.iterator.remaining()
        return [
            containers.TupleVariable([constants.ConstantVariable(self.count + i), v])
            for i, v in enumerate(items)
        ]

    def reconstruct(self, codegen: Any) -> str:
        inner = codegen.reconstruct(self.iterator)
        return f"{codegen.bind(enumerate, 'enumerate')}({inner}, {self.count})"


class UserIteratorVariable(IteratorVariable):
    """A user object whose class defines ``__next__`` in Python (an ``__iter__`` returning
    ``self``, say): each step inlines ``__next__``; the ``StopIteration`` it raises ends it."""

    def __init__(self, obj: VariableTracker):
        self.obj = obj

    def python_type(self) -> type:
        return self.obj.python_type()

    def next(self, tx: Translator) -> VariableTracker | None:
        try:
            return tx.call_function(self.obj.var_getattr(tx, "__next__"), [], {})
        except exceptions.Raised as e:
            if issubclass(e.exc.python_type(), StopIteration):
                return None
            raise

    def remaining(self) -> list[VariableTracker]:
        raise Unsupported(f"the items left in {self.obj.describe()} (its __next__ runs lazily)")

    def reconstruct(self, codegen: Any) -> str:
        return codegen.reconstruct(self.obj)  # the object is its own iterator


class GeneratorVariable(IteratorVariable):
    """A generator the frame created: its code runs (in ``translator``) up to the next
    ``yield`` each time an item is asked for, as Python runs it; ``send``, ``throw`` and
    ``close`` as Python's (the exception goes to the handlers around the ``yield``)."""

    METHODS = ("send", "close", "throw", "__next__")

    def __init__(self, translator: Translator):
        self.translator = translator
        self.started = False

    def python_type(self) -> type:
        return types.GeneratorType

    def next(self, tx: Translator) -> VariableTracker | None:
        return self.send(tx, constants.ConstantVariable(None))

    def send(self, tx: Translator, value: VariableTracker) -> VariableTracker | None:
        """The next item with ``value`` as the result of the suspended ``yield``; None once the
        generator returned."""
        if self.started:
            return self.translator.resume_generator(value)
        if not (value.is_constant() and value.as_python_constant() is None):
            raise Unsupported("send() of a value to a generator not started (TypeError)")
        self.started = True
        return self.translator.resume_generator(None)

    def return_value(self) -> VariableTracker | None:
        """What the generator returned (``yield from``'s value); None while it runs."""
        return self.translator.return_value

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name not in self.METHODS:
            raise Unsupported(f"attribute {name!r} of a generator")
        return functions.BoundMethodVariable(self, name)

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name in ("send", "__next__") and not kwargs and len(args) == (name == "send"):
            item = self.send(tx, args[0] if args else constants.ConstantVariable(None))
            return _stop_if_finished(item, f"generator.{name}()")
        if name == "close" and not args and not kwargs:
            self.close(tx)
            return constants.ConstantVariable(None)
        if name == "throw" and len(args) == 1 and not kwargs:
            item = self.throw(tx, exceptions.instance(tx, args[0]))
            return _stop_if_finished(item, "generator.throw()")
        raise Unsupported(f"generator.{name}() with these arguments")

    def throw(self, tx: Translator, exc: VariableTracker) -> VariableTracker | None:
        """``exc`` raised at the suspended ``yield``: the next item, or None once the generator
        returned; an exception it lets out is raised here (``exc`` too, if it was not started)."""
        t = self.translator
        if self.started and t.return_value is None and bc.resumes_yield_from(t.instructions[t.ip]):
            raise Unsupported("throw() into a generator suspended in yield from")
        if not self.started:  # Python raises it before the first line runs
            self.started = True
            t.return_value = constants.ConstantVariable(None)
        return t.resume_generator(None, thrown=exc)

    def close(self, tx: Translator) -> None:
        """``GeneratorExit`` at the suspended ``yield`` (after closing a ``yield from``'s
        delegate): its handlers run; it must then end, not yield again."""
        t = self.translator
        if not self.started or t.return_value is not None:
            self.started = True
            t.return_value = constants.ConstantVariable(None)
            return
        if bc.resumes_yield_from(t.instructions[t.ip]) and isinstance(
            t.stack[-1], GeneratorVariable
        ):
            t.stack[-1].close(tx)
        try:
            item = t.resume_generator(None, thrown=exceptions.ExceptionVariable(GeneratorExit, []))
        except exceptions.Raised as e:
            if issubclass(e.exc.python_type(), GeneratorExit):
                return
            raise
        if item is not None:
            raise exceptions.error(
                RuntimeError, "generator ignored GeneratorExit", reason="generator.close()"
            )

    def remaining(self) -> list[VariableTracker]:
        raise Unsupported("a generator left mid-run (its code has not run on the rest)")

    def reconstruct(self, codegen: Any) -> str:
        raise Unsupported("cannot rebuild a generator the frame created (its code is mid-run)")


def _stop_if_finished(item: VariableTracker | None, what: str) -> VariableTracker:
    """A generator step's item; ``StopIteration`` where the generator returned instead."""
    if item is None:
        raise exceptions.error(StopIteration, reason=f"{what} of a finished generator")
    return item
