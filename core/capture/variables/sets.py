"""Sets and frozensets, iterated in CPython's own order.

CPython iterates a set in the order of its hash table, which follows the hashes of the
elements and the table's history (insertions, deletions, resizes, where ``pop`` stopped).
A ``SetVariable`` therefore keeps a *mirror*: a real set of keys on which every operation of
the frame runs, as the same C call with arguments of the same kinds (a set, a dict, a list),
so that its table, and its order, are the real ones. A key is the element itself for a
constant; for an object hashed by identity (a class, a tensor) it is an ``Element``, which
hashes as the real object does where that object exists now (a class), and by its tracker
where it does not (a tensor the graph computes: eager hashes its address). A mirror holding
such a stand-in has the real contents but not the real order: reading that order (iteration,
``pop``) breaks the graph, as does reading the order of a set argument after the frame
changed it (its table's history is not known, only its order, which is guarded).
"""

from __future__ import annotations

import operator
import types
from typing import TYPE_CHECKING, Any

from torchkiln.capture import variables
from torchkiln.capture.runtime import set_entries
from torchkiln.capture.variables import constants, containers, exceptions, tensors
from torchkiln.capture.variables.base import IteratorVariable, ValueVariable, VariableTracker
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


class Element:
    """The mirror's key for a non-constant element: equal by identity, as eager compares it."""

    __slots__ = ("hash", "identity", "real", "vt")

    def __init__(self, vt: VariableTracker, identity: Any, real: bool):
        self.vt = vt
        self.identity = identity
        #: the real object's own hash where it exists now; else one of the tracker's
        self.real = real
        self.hash = hash(identity) if real else id(identity)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Element):
            return NotImplemented  # a ``HashedKey``'s ``__eq__`` decides, as the user's does
        if other.identity is self.identity:
            return True
        return self.real and other.real and bool(self.identity == other.identity)


class HashedKey:
    """The mirror's key for an object whose class defines ``__hash__`` in Python: the hash that
    method gave (inlined), and equality by the class's ``__eq__``, inlined when the mirror's C
    code compares two keys, which it does where CPython would: on equal hashes, stored key
    first. Such hashes may hash strings, salted per process: a set of these keys never
    tells its order (``_is_real``)."""

    __slots__ = ("hash", "tx", "vt")

    def __init__(self, tx: Translator, vt: VariableTracker):
        self.tx = tx
        self.vt = vt
        self.hash = variables.dunders.hash_of(tx, vt).as_python_constant()

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HashedKey) and other.vt is self.vt:
            return True  # the same object: CPython compares by identity first
        return self.tx.truth(self.tx.binary_op("==", self.vt, tracker_of(other)))


def key_of(vt: VariableTracker, tx: Translator | None = None) -> Any:
    """The mirror key of element ``vt`` (Python's own ``TypeError`` if it is unhashable); an
    object hashed by its class's Python ``__hash__`` needs ``tx``, which runs it."""
    if vt.is_constant() or tensors.holds_size(vt):  # a symbolic size hashes its value
        value = vt.as_python_constant()
        try:
            hash(value)
        except TypeError:
            raise _unhashable(value) from None
        return value
    if isinstance(vt, containers.TupleVariable) and vt.cls is tuple:
        return tuple(key_of(item, tx) for item in vt.items)
    if isinstance(vt, tensors.TensorVariable):
        return Element(vt, vt, real=False)
    if isinstance(vt, SetVariable) and vt.frozen:
        raise Unsupported("a frozenset of tensors or objects as a set element")
    if isinstance(vt, ValueVariable):
        cls = vt.python_type()
        if cls.__hash__ is None:
            raise _unhashable(vt)
        if isinstance(cls.__hash__, types.FunctionType):
            if tx is None or not isinstance(vt, variables.objects.UserObjectVariable):
                raise Unsupported(f"a {cls.__name__} as a set element or dict key here")
            return HashedKey(tx, vt)
        if isinstance(
            vt, variables.builtin_subclasses.BuiltinSubclassVariable
        ):  # hashed by its items
            raise Unsupported(f"a {cls.__name__} as a set element or dict key")
        if vt.value is None:  # an object the frame made: hashed by its address, not known yet
            return Element(vt, vt, real=False)
        return Element(vt, vt.value, real=True)
    if isinstance(vt, (SetVariable, containers.ListVariable, containers.DictVariable)):
        raise _unhashable(vt)
    raise Unsupported(f"{vt.describe()} as a set element")


def _unhashable(value: Any) -> exceptions.Raised:
    cls = value.python_type() if isinstance(value, VariableTracker) else type(value)
    name = cls.__name__
    return exceptions.error(TypeError, f"unhashable type: '{name}'", reason=f"hashing a {name}")


def tracker_of(key: Any) -> VariableTracker:
    """The element a mirror key stands for."""
    if isinstance(key, (Element, HashedKey)):
        return key.vt
    if type(key) is tuple and not constants.is_constant_value(key):
        return containers.TupleVariable([tracker_of(k) for k in key])
    return constants.ConstantVariable(key)


def _is_real(key: Any) -> bool:
    """Whether ``key`` hashes as the element does in eager, in any process."""
    if isinstance(key, HashedKey):
        return False
    if isinstance(key, Element):
        return key.real
    return all(map(_is_real, key)) if type(key) is tuple else True


def _salted(key: Any) -> list[Any]:
    """The parts of ``key`` whose hash another process may not share: strings and bytes (salted
    per process), objects (hashed by address); numbers hash alike everywhere."""
    if type(key) is tuple:
        return [part for k in key for part in _salted(k)]
    return [] if type(key) in (int, float, complex, bool) else [key]


class SetVariable(VariableTracker):
    """A set or frozenset; see the module docstring. ``exact``: the mirror's table is the real
    one. ``order``: the real iteration order of a set argument, while the frame has not
    changed it. ``log``: the changes to a set argument, replayed on it after the graph."""

    def __init__(
        self,
        mirror: set | frozenset,
        source: str | None = None,
        exact: bool = True,
        order: list | None = None,
    ):
        self.mirror = mirror
        self.source = source
        self.exact = exact and all(map(_is_real, mirror))
        self.order = order
        self.log: list[tuple[str, list[VariableTracker]]] = []

    @property
    def frozen(self) -> bool:
        return type(self.mirror) is frozenset

    def python_type(self) -> type:
        return type(self.mirror)

    def describe(self) -> str:
        return f"a {self.python_type().__name__} of {len(self.mirror)}"

    def var_getattr(self, tx: Translator, name: str) -> VariableTracker:
        return containers.method_of(self, name)

    def truth(self, tx: Translator) -> bool:
        return bool(self.mirror)

    def contains(self, tx: Translator, item: VariableTracker) -> bool:
        return key_of(item, tx) in self.mirror

    def keys_in_order(self, tx: Translator) -> list:
        """The mirror's keys in the real iteration order (see the module docstring)."""
        if len(self.mirror) > 1 and self.order is None and not self.exact:
            reason = (
                "a set argument the frame changed: the layout of its hash table is not known"
                if self.source is not None
                else "a set of tensors or objects the frame made, hashed by their addresses"
            )
            raise Unsupported(f"the iteration order of {reason}")
        if self.order is not None:
            return list(self.order)
        keys = list(self.mirror)
        if len(keys) > 1:
            guard_hashes(tx, keys)
        return keys

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return [tracker_of(k) for k in self.keys_in_order(tx)]

    def make_iterator(self, tx: Translator) -> IteratorVariable:
        return SetIteratorVariable(self, self.unpack(tx))

    def call_method(self, tx: Translator, name: str, args: list, kwargs: dict) -> VariableTracker:
        if kwargs:
            raise Unsupported(f"{self.python_type().__name__}.{name} with keyword arguments")
        if name == "__len__" and not args:
            return constants.ConstantVariable(len(self.mirror))
        if name == "__iter__" and not args:
            return self.make_iterator(tx)
        if name == "__contains__" and len(args) == 1:
            return constants.ConstantVariable(self.contains(tx, args[0]))
        if name in ELEMENT_METHODS and len(args) == (name != "pop"):
            return self._element_method(tx, name, args)
        if name in BULK_METHODS:
            operands = [operand(tx, a) for a in args]
            exact = self.exact and all(o.exact for o in operands)
            result = getattr(self.mirror, name)(*(o.real for o in operands))
            if name.endswith("update"):
                self._changed(tx, name, [o.snapshot for o in operands], exact)
            if not isinstance(result, (set, frozenset)):  # None, or the answer of ``issubset``...
                return constants.ConstantVariable(result)
            return SetVariable(result, exact=exact)
        if name == "clear" and not args:
            self.mirror.clear()
            self._changed(tx, name, [], True)
            return constants.ConstantVariable(None)
        if name == "copy" and not args:
            return self if self.frozen else SetVariable(self.mirror.copy(), exact=self.exact)
        method = f"__{name.strip('_')}__"
        if len(args) == 1 and method in DUNDER_OPERATORS:
            result = self.binary(tx, DUNDER_OPERATORS[method], args[0], False)
            return result if result is not None else constants.ConstantVariable(NotImplemented)
        raise Unsupported(f"{self.python_type().__name__}.{name} with {len(args)} arguments")

    def _element_method(self, tx: Translator, name: str, args: list) -> VariableTracker:
        """``add``, ``discard``, ``remove``, ``pop``: Python's errors where it raises one."""
        if name == "pop":
            if not self.mirror:
                raise exceptions.error(KeyError, "pop from an empty set", reason="pop() of {}")
            if not self.exact and len(self.mirror) > 1:
                raise Unsupported(f"pop() of {self.describe()}: where it starts is not known")
            keys = list(self.mirror)
            if len(keys) > 1:
                guard_hashes(tx, keys)
            key = self.mirror.pop()
            self._changed(tx, name, [], True)
            return tracker_of(key)
        key = key_of(args[0], tx)
        if name == "remove" and key not in self.mirror:
            if not args[0].is_constant():
                raise Unsupported(f"set.remove of {args[0].describe()} not in the set (KeyError)")
            raise exceptions.error(KeyError, key, reason=f"set.remove({key!r}) of a missing key")
        getattr(self.mirror, name)(key)
        self._changed(tx, name, args, _is_real(key))
        return constants.ConstantVariable(None)

    def _changed(self, tx: Translator, name: str, args: list, exact: bool) -> None:
        """After a change: a set argument is written back by replaying it; its old order, and
        an exact table made inexact by a stand-in key, are no longer known."""
        self.exact = self.exact and exact
        self.order = None
        if self.source is not None:
            tx.output.side_effects.mutate(self)
            self.log.append((name, args))

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        """``| & - ^`` (and in place), comparisons: with another set or frozenset only, as
        Python's own operators; ``==`` with anything else is False."""
        op = symbol.removesuffix("=") if symbol not in COMPARISONS else symbol
        if not (isinstance(other, SetVariable) or _is_constant_set(other)):
            if symbol in ("==", "!="):
                return constants.ConstantVariable(symbol == "!=")
            return None
        theirs = operand(tx, other)
        if symbol in IN_PLACE and not reflected:
            self.call_method(tx, IN_PLACE[symbol], [other], {})
            return self
        a, b = (theirs.real, self.mirror) if reflected else (self.mirror, theirs.real)
        result = SET_OPERATORS[op](a, b)
        if isinstance(result, bool):
            return constants.ConstantVariable(result)
        return SetVariable(result, exact=self.exact and theirs.exact)

    def reconstruct_literal(self, codegen: Any) -> str:
        """A new set (frozenset) of the elements added one by one in the traced order: the
        same table as the mirror's where that grew the same way (no deletions)."""
        items = "".join(f"{codegen.reconstruct(tracker_of(k))}, " for k in self.mirror)
        return f"{self.python_type().__name__}(({items}))"

    def write_back(self, codegen: Any, new: str) -> list[str]:
        """The frame's changes replayed on the real set, in order, so that its table ends as
        eager leaves it (arguments read before any side effect runs)."""
        return [
            f"{self.method_expr(codegen, name)}"
            f"({', '.join(codegen.temp(codegen.reconstruct(a)) for a in args)})"
            for name, args in self.log
        ]

    def method_expr(self, codegen: Any, name: str) -> str:
        """The real set's method ``name``, bound (a subclass's storage: ``set``'s own)."""
        return f"{self.source}.{name}"


#: Methods that take one element.
ELEMENT_METHODS = ("add", "discard", "remove", "pop")

#: Methods that take iterables, run on the mirror with the same kinds of arguments.
BULK_METHODS = (
    "update", "difference_update", "intersection_update", "symmetric_difference_update",
    "union", "intersection", "difference", "symmetric_difference",
    "issubset", "issuperset", "isdisjoint",
)  # fmt: skip

SET_OPERATORS = {
    "|": operator.or_, "&": operator.and_, "-": operator.sub, "^": operator.xor,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}  # fmt: skip

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")

#: In-place operators: the method each one runs on a set (frozensets have none).
IN_PLACE = {
    "|=": "update", "&=": "intersection_update", "-=": "difference_update",
    "^=": "symmetric_difference_update",
}  # fmt: skip

DUNDER_OPERATORS = {
    "__or__": "|", "__and__": "&", "__sub__": "-", "__xor__": "^", "__eq__": "==",
    "__ne__": "!=", "__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">=",
}  # fmt: skip


def _is_constant_set(vt: VariableTracker) -> bool:
    return vt.is_constant() and isinstance(vt.as_python_constant(), frozenset)


class Operand:
    """An argument of a set operation as the mirror needs it: ``real`` is what the C code
    reads (a mirror, a frozenset, a dict, a list of keys), ``exact`` whether it reads it in the
    real order, ``snapshot`` the argument as it is now, to replay the operation later."""

    def __init__(self, real: Any, exact: bool, snapshot: VariableTracker):
        self.real = real
        self.exact = exact
        self.snapshot = snapshot


def operand(tx: Translator, vt: VariableTracker) -> Operand:
    if isinstance(vt, SetVariable):
        copy = SetVariable(vt.mirror.copy(), exact=False)
        return Operand(vt.mirror, vt.exact, copy)
    if vt.is_constant():  # a frozenset, a string, a range...: the C code reads it itself
        return Operand(vt.as_python_constant(), True, vt)
    if type(vt) is containers.DictVariable:  # a dict's keys: read as a dict, sized first
        return Operand(dict.fromkeys(vt.items), True, vt.copy())
    if isinstance(vt, containers.DictViewVariable) and vt.kind != "values":
        view = _real_view(vt)
        return Operand(view, all(map(_is_real, view)), containers.TupleVariable(vt.unpack(tx)))
    items = tx.unpack_iterable(vt)
    keys = [key_of(item, tx) for item in items]
    return Operand(keys, all(map(_is_real, keys)), containers.TupleVariable(items))


def construct(
    tx: Translator, cls: type, iterable: VariableTracker | None = None
) -> VariableTracker:
    """``set(iterable)`` / ``frozenset(iterable)``; a frozenset of constants is a constant."""
    if iterable is None:
        return SetVariable(cls())
    arg = operand(tx, iterable)
    if cls is frozenset and isinstance(iterable, SetVariable) and iterable.frozen:
        return iterable  # ``frozenset(f)`` is ``f``
    result = cls(arg.real)
    if cls is frozenset and all(map(constants.is_constant_value, result)):
        return constants.ConstantVariable(result)
    return SetVariable(result, exact=arg.exact)


def build_set(tx: Translator, items: list[VariableTracker]) -> SetVariable:
    """``{a, b, c}`` (``BUILD_SET``): an empty set, then each item added in order."""
    result = SetVariable(set())
    for item in items:
        result.call_method(tx, "add", [item], {})
    return result


def from_real(
    out: Any, value: set | frozenset, source: str | None, kind: type[SetVariable] | None = None
) -> SetVariable:
    """A set read through ``source``: constants, and classes or functions (hashed by identity,
    and fixed by the guard as the set's elements are). Its type, elements and order are
    guarded: the table's layout behind that order is not known (``SetVariable.exact``).
    ``kind``: the tracker of a user subclass's items, read with the native iterator."""
    keys = []
    for v in value:
        if constants.is_constant_value(v):
            keys.append(v)
        elif isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType)):
            keys.append(Element(out.wrap(v, None), v, real=True))
        else:
            raise Unsupported(
                f"a set holding a {type(v).__name__} (its elements have no source to guard)"
            )
    native = frozenset if isinstance(value, frozenset) else set
    if source is not None:
        guards = out.guards
        guards.type_is(source, type(value))
        entries = set_entries(native.__iter__(value))
        read = source if type(value) is native else f"{guards.bind(native.__iter__)}({source})"
        guards.add(
            f"{guards.bind(set_entries, 'set_entries')}({read}) == {guards.bind(entries, 'set')}",
            2,
            f"{source} holds {native.__repr__(value)} in this order",
        )
    return (kind or SetVariable)(native(keys), source, exact=False, order=keys)


def guard_hashes(tx: Translator, keys: list) -> None:
    """The order of ``keys`` follows their hashes: guard those another process may not share,
    so that a capture reloaded there (``persist``) is used only where the order holds."""
    guards = tx.output.guards
    salted = [part for key in keys for part in _salted(key)]
    text = next((k for k in salted if type(k) in (str, bytes)), None)
    if text is not None:  # one salt for all strings
        guards.add(f"hash({text!r}) == {hash(text)}", 2, "strings hash as when captured")
    for part in salted:
        if type(part) not in (str, bytes):
            value = part.identity if isinstance(part, Element) else part
            name = guards.literal(value)
            guards.add(f"hash({name}) == {hash(value)}", 2, f"{name} hashes as when captured")


class SetIteratorVariable(IteratorVariable):
    """``iter(set)``: Python stops it with ``RuntimeError`` if the set changes size meanwhile."""

    def __init__(self, owner: SetVariable, items: list[VariableTracker]):
        super().__init__(items)
        self.owner = owner
        self.snapshot = owner.mirror.copy()

    def python_type(self) -> type:
        return type(iter(set()))

    def next(self, tx: Translator) -> VariableTracker | None:
        if self.index >= len(self.items):
            return None  # exhausted: Python no longer looks at the set
        if len(self.owner.mirror) != len(self.snapshot):
            raise exceptions.error(
                RuntimeError, "Set changed size during iteration", reason="a set changed size"
            )
        if self.owner.mirror != self.snapshot:
            raise Unsupported("a set changed (same size) while an iterator over it was live")
        return super().next(tx)


def _real_view(view: containers.DictViewVariable) -> Any:
    """A real ``keys()`` or ``items()`` view of a dict of the same keys (and values' keys)."""
    items = view.mapping.items
    if view.kind == "keys":
        return dict.fromkeys(items).keys()
    return {k: key_of(v) for k, v in items.items()}.items()


def view_binary(
    tx: Translator,
    view: containers.DictViewVariable,
    symbol: str,
    other: VariableTracker,
    reflected: bool,
) -> VariableTracker | None:
    """``keys()`` and ``items()`` are sets: ``& | - ^`` give a set, comparisons a bool; the
    other side is any iterable (a set, a list, another view). Run on a real view, so that the
    result's order is the real one."""
    if view.kind == "values" or symbol not in SET_OPERATORS:
        return None
    set_like = isinstance(other, (SetVariable, containers.DictViewVariable))
    if symbol in COMPARISONS and not (set_like or _is_constant_set(other)):
        return None  # ``keys() < [1]`` is a TypeError, ``keys() == [1]`` False: not modelled
    mine, theirs = _real_view(view), operand(tx, other)
    a, b = (theirs.real, mine) if reflected else (mine, theirs.real)
    result = SET_OPERATORS[symbol](a, b)
    if isinstance(result, bool):
        return constants.ConstantVariable(result)
    return SetVariable(result, exact=theirs.exact)
