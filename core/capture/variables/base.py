"""What every variable tracker is: the protocol, the NULL marker, trackers held by identity,
the iteration protocol, and the class lookups that decide which Python code a value runs.

Nothing here imports another family, so every family can subclass these at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

    def has_attribute(self, tx: Translator, name: str) -> bool:
        """``hasattr(self, name)``: whether reading the attribute succeeds."""
        try:
            tx.getattr(self, name)
        except Unsupported as e:
            if is_missing_attribute(e):
                return False
            raise
        return True

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

    def enter(self, tx: Translator) -> tuple[VariableTracker, VariableTracker]:
        """``with self as value:``: enters the block; returns its ``__exit__`` and ``value``."""
        raise Unsupported(
            f"with block over {self.describe()} (traced: grad-mode contexts, contextlib's managers, "
            "classes with __enter__ and __exit__ in Python)"
        )

    def binary(
        self, tx: Translator, symbol: str, other: VariableTracker, reflected: bool
    ) -> VariableTracker | None:
        """``self <symbol> other`` (``other <symbol> self`` if ``reflected``) where the type
        defines the operator (a ``Counter``'s ``+``, a dict view's ``&``); None where it
        does not, as Python's ``NotImplemented``."""
        return None

    def reconstruct(self, codegen: Any) -> str:
        """A Python expression that rebuilds the real value after the graph ran, for the kinds
        ``codegen.reconstruct`` does not build itself (it reads sources, constants, tensors and
        containers first); ``codegen`` binds the objects the expression needs."""
        raise Unsupported(
            f"cannot rebuild {self.describe()} after the graph (e.g. a function created in the frame)"
        )

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

    def send(self, tx: Translator, value: VariableTracker) -> VariableTracker | None:
        """``yield from``'s step: ``next``, for an iterator that is not a generator (only None
        can be sent to it)."""
        if not (value.is_constant() and value.as_python_constant() is None):
            raise Unsupported(f"yield from {self.describe()} sent a value (it has no send())")
        return self.next(tx)

    def remaining(self) -> list[VariableTracker]:
        return self.items[self.index :]

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        items = []
        while (item := self.next(tx)) is not None:
            items.append(item)
        return items

    def reconstruct(self, codegen: Any) -> str:
        return f"iter([{', '.join(codegen.reconstruct(i) for i in self.remaining())}])"


MISSING = object()


def class_lookup(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return MISSING


def is_missing_attribute(e: Unsupported) -> bool:
    """Whether reading an attribute failed as ``AttributeError`` (which ``hasattr`` and
    ``getattr`` with a default catch): one raised in traced code (``Raised``) or a tracker's
    own "has no attribute"."""
    exc = getattr(e, "exc", None)
    if exc is not None:
        return issubclass(exc.python_type(), AttributeError)
    return "has no attribute" in str(e)


def _defines_truth(cls: type) -> bool:
    """Whether ``bool()`` of an instance runs the class's ``__bool__`` or ``__len__``."""
    return any(class_lookup(cls, name) is not MISSING for name in ("__bool__", "__len__"))
