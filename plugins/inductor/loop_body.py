"""Loop bodies, recorded once into printable lists of ops that the code generators read.

In: a lowering's body, a Python function of its index that calls ``ops.load``,
``ops.add``, ``ops.masked`` ... (:data:`ops`, the lowerings' vocabulary). The IR
(:mod:`.ir`) runs it once, under :func:`record`, with one variable per dimension:
``x0, x1 ...`` over the output's dimensions and ``r0, r1 ...`` over the reduced
ones. Out: a :class:`LoopBody`, an SSA list of :class:`Op` ending in a ``store``
(after a ``reduction`` for reduction bodies)::

    %0 = load(arg0, r0 + 256L*x0) : float32
    %1 = load(arg1, r0) : float32
    %2 = mul(%0, %1) : float32
    %3 = reduction(sum, %2) : float32
    store(buf1, x0, %3)

Every value has a compute dtype (float16/bfloat16 compute in float32). Index
arguments are :class:`~.indexing.Expr`; the scheduler and the code generators put
their loop variables in with :meth:`LoopBody.subs`. The ops:

* ``load(buffer, index)``; ``store(buffer, index, value[, mode])``, ``mode="add"``
  accumulating (scatters);
* ``constant(value, dtype)``, ``index_expr(index, dtype)``, ``to_dtype(x, dtype)``
  (rounding to float16/bfloat16 when ``dtype`` is one), ``rand``/``randn(seed,
  offset, dtype)`` (counter-based: the graph's seed number ``seed``, the element
  ``offset``);
* ``indirect_indexing(x, size, wrap)``: an index read at run time; later indices
  refer to it as the atom named after the op's value (``%4``);
* ``masked(mask, other) { ...; yield v }``: the block's ops (its loads) run only
  where ``mask`` holds, ``other`` elsewhere; ``where(cond, a, b)``;
* the math of :data:`.math_ops.MATH_OPS` (predicates give bool, the others their first
  argument's dtype);
* ``reduction(type, value[, index])``: ``value`` accumulated over the ``r`` loops
  (``index``, the flat position in them, for argmax/argmin).

Recording folds repeated ops into one (as the generators' own CSE would), so a
body lists each computation once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from .indexing import Atom, Expr, Indirect
from .math_ops import MATH_OPS, PREDICATES, UNARY_OPS

#: the dtype a value of each storage dtype is computed in
COMPUTE_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return COMPUTE_DTYPE.get(dtype, dtype)


@dataclass(frozen=True)
class Value:
    """The result of one op: ``%<n>``, with its compute dtype."""

    name: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Block:
    """The ops of a ``masked`` op, and the value it yields."""

    ops: tuple[Op, ...]
    result: Value


@dataclass(frozen=True, eq=False)
class Op:
    """``out = name(*args)``; ``block`` holds a ``masked`` op's ops."""

    name: str
    args: tuple[Any, ...]
    out: Value | None = None
    block: Block | None = None

    def indirect_atom(self) -> Indirect:
        """The index atom an ``indirect_indexing`` op defines."""
        assert self.name == "indirect_indexing" and self.out is not None
        return Indirect(self.out.name, self.args[1])

    def map_indices(self, fn: Callable[[Expr], Expr]) -> Op:
        args = tuple(fn(a) if isinstance(a, Expr) else a for a in self.args)
        block = self.block
        if block is not None:
            block = Block(tuple(op.map_indices(fn) for op in block.ops), block.result)
        return Op(self.name, args, self.out, block)

    def lines(self) -> list[str]:
        call = f"{self.name}({', '.join(_show(a) for a in self.args)})"
        if self.out is None:
            return [call]
        head = f"{self.out} = {call} : {_show(self.out.dtype)}"
        if self.block is None:
            return [head]
        inner = [line for op in self.block.ops for line in op.lines()]
        inner.append(f"yield {self.block.result}")
        return [head + " {", *("    " + line for line in inner), "}"]


def _show(arg: Any) -> str:
    if isinstance(arg, torch.dtype):
        return str(arg).removeprefix("torch.")
    if isinstance(arg, (Value, Expr, str)):
        return str(arg)
    return repr(arg)


@dataclass(frozen=True)
class LoopBody:
    """One node's computation at one point of its iteration space, ending in a ``store``."""

    ops: tuple[Op, ...]

    @property
    def store(self) -> Op:
        return self.ops[-1]

    @property
    def reduction(self) -> Op | None:
        """The ``reduction`` op of a reduction body."""
        op = self.ops[-2] if len(self.ops) > 1 else None
        return op if op is not None and op.name == "reduction" else None

    @property
    def compute(self) -> tuple[Op, ...]:
        """The ops before the ``reduction`` and ``store``."""
        return self.ops[: -2 if self.reduction is not None else -1]

    def loads(self) -> list[tuple[str, Expr]]:
        """``(buffer, index)`` of every load, masked ones included, in order."""
        return [(op.args[0], op.args[1]) for op in _walk(self.ops) if op.name == "load"]

    def subs(self, mapping: Mapping[Atom, Expr]) -> LoopBody:
        """The body with ``mapping`` (variables to expressions) applied to every index."""
        return LoopBody(tuple(op.map_indices(lambda e: e.subs(mapping)) for op in self.ops))

    def lines(self) -> list[str]:
        return [line for op in self.ops for line in op.lines()]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _walk(ops: tuple[Op, ...]) -> Iterator[Op]:
    for op in ops:
        if op.block is not None:
            yield from _walk(op.block.ops)
        yield op


# ---------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------


@dataclass
class _Scope:
    ops: list[Op] = field(default_factory=list)
    cse: dict[tuple, Value] = field(default_factory=dict)
    parent: _Scope | None = None

    def lookup(self, key: tuple) -> Value | None:
        scope: _Scope | None = self
        while scope is not None:
            if key in scope.cse:
                return scope.cse[key]
            scope = scope.parent
        return None


class _Recording:
    def __init__(self) -> None:
        self.scope = _Scope()
        self.count = 0

    def new_name(self) -> str:
        self.count += 1
        return f"%{self.count - 1}"

    def add(self, name: str, args: tuple, dtype: torch.dtype | None, cse: bool = True) -> Any:
        """Append ``name(*args)`` (or find it, when ``cse``); its value, None without ``dtype``."""
        key = (name, *(_key(a) for a in args))
        if cse and (hit := self.scope.lookup(key)) is not None:
            return hit
        out = Value(self.new_name(), dtype) if dtype is not None else None
        self.scope.ops.append(Op(name, args, out))
        if cse and out is not None:
            self.scope.cse[key] = out
        return out


def _key(arg: Any) -> Any:
    """CSE key of an argument: constants by type and text (``0.0`` is not ``-0.0``)."""
    if isinstance(arg, (Value, Expr, torch.dtype, str, type(None))):
        return arg
    return type(arg).__name__, repr(arg)


_state = threading.local()


def _current() -> _Recording:
    recording = getattr(_state, "recording", None)
    if recording is None:
        raise RuntimeError("ops.* was called outside of a loop body being recorded")
    return recording


def record(fn: Callable[[], None]) -> LoopBody:
    """Run ``fn`` (which calls ``ops.*`` and ends with :func:`store`) once; its ops."""
    previous = getattr(_state, "recording", None)
    recording = _state.recording = _Recording()
    try:
        fn()
    finally:
        _state.recording = previous
    body = LoopBody(tuple(recording.scope.ops))
    if not body.ops or body.store.name != "store":
        raise AssertionError("a loop body must end with a store")
    return body


def store(name: str, index: Expr, value: Value, mode: str | None = None) -> None:
    """End the body: write ``value`` at ``index`` of ``name`` (``mode="add"``: accumulate)."""
    args = (name, index, value) if mode is None else (name, index, value, mode)
    _current().add("store", args, None, cse=False)


def reduction(reduction_type: str, value: Value, dtype: torch.dtype, index: Expr | None) -> Value:
    """``value`` reduced over the ``r`` loops; ``index``: its flat position, for argmax/argmin."""
    args = (reduction_type, value) if index is None else (reduction_type, value, index)
    return _current().add("reduction", args, compute_dtype(dtype), cse=False)


class _Ops:
    """The lowerings' vocabulary: every call appends an op to the body being recorded."""

    def load(self, name: str, index: Expr, dtype: torch.dtype) -> Value:
        """``name[index]``, a buffer of storage ``dtype``."""
        return _current().add("load", (name, index), compute_dtype(dtype))

    def constant(self, value: Any, dtype: torch.dtype) -> Value:
        return _current().add("constant", (value, dtype), compute_dtype(dtype))

    def index_expr(self, index: Expr, dtype: torch.dtype) -> Value:
        return _current().add("index_expr", (index, dtype), compute_dtype(dtype))

    def to_dtype(self, x: Value, dtype: torch.dtype) -> Value:
        if dtype == x.dtype:
            return x
        out = torch.bool if dtype == torch.bool else compute_dtype(dtype)
        return _current().add("to_dtype", (x, dtype), out)

    def indirect_indexing(self, x: Value, size: int, wrap: bool = True) -> Expr:
        """An index read at run time (``x``, wrapped into ``[0, size)`` when ``wrap``)."""
        op_value = _current().add("indirect_indexing", (x, size, wrap), torch.int64, cse=False)
        return Expr.of(Indirect(op_value.name, size))

    def masked(self, mask: Value, body: Callable[[], Value], other: Any) -> Value:
        """``body()`` where ``mask`` holds, else the constant ``other``."""
        recording = _current()
        name, outer = recording.new_name(), recording.scope
        recording.scope = _Scope(parent=outer)
        try:
            result = body()
        finally:
            inner, recording.scope = recording.scope, outer
        out = Value(name, result.dtype)
        outer.ops.append(Op("masked", (mask, other), out, Block(tuple(inner.ops), result)))
        return out

    def where(self, cond: Value, a: Value, b: Value) -> Value:
        return _current().add("where", (cond, a, b), a.dtype)

    def rand(self, seed: int, offset: Expr, dtype: torch.dtype) -> Value:
        """Uniform in [0, 1) from the graph's seed number ``seed`` at element ``offset``."""
        return _current().add("rand", (seed, offset, dtype), compute_dtype(dtype))

    def randn(self, seed: int, offset: Expr, dtype: torch.dtype) -> Value:
        return _current().add("randn", (seed, offset, dtype), compute_dtype(dtype))

    def __getattr__(self, name: str) -> Callable[..., Value]:
        if name not in MATH_OPS:
            raise AttributeError(f"ops.{name} is not an op (see math_ops.MATH_OPS)")
        arity = 1 if name in UNARY_OPS else 2

        def math(*args: Value) -> Value:
            recording = _current()
            if len(args) != arity:
                raise TypeError(f"ops.{name} takes {arity} values, got {len(args)}")
            dtype = torch.bool if name in PREDICATES else args[0].dtype
            return recording.add(name, args, dtype)

        math.__name__ = name
        return math


ops = _Ops()
