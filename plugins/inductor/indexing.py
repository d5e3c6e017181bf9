"""Integer index expressions of the loop IR: affine forms over loop variables.

An index is ``sum(coeff * atom) + const``. Atoms are loop variables (``Var``, with their
range), values loaded at run time (``Indirect``, for gather/index), and ``FloorDiv``/``Mod``
of a sub-expression by a positive divisor (what reshapes of computed values need).
Coefficients, constants, ranges and divisors are sizes (:mod:`.sizes`): ints, or
polynomials in the graph's size symbols where sizes are symbolic. Construction simplifies
with the ranges of the variables, so views compose into the plain strided index whenever
one exists: ``1024 * ((1024*i + j) // 1024) + (1024*i + j) % 1024`` is ``1024*i + j``, and
``(s1*i + j) // s1`` is ``i`` for ``j < s1``. A simplification that can't be proved for every
size is not made. Every ``FloorDiv``/``Mod`` operand is non-negative, so C's ``/`` and ``%``
print them correctly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import sympy

from .sizes import (
    Size,
    SymbolicUnsupported,
    all_static,
    as_size,
    divides,
    exact_quotient,
    floor_quotient,
    gcd,
    is_static,
    known_less,
    known_nonnegative,
    known_positive_divisor,
    size_text,
)


@dataclass(frozen=True)
class Var:
    """A loop variable ranging over ``[0, size)``."""

    name: str
    size: Size

    def bounds(self) -> tuple[Size, Size]:
        return 0, self.size - 1


@dataclass(frozen=True)
class Indirect:
    """An index read from a tensor at run time, already wrapped into ``[0, size)``."""

    name: str
    size: Size

    def bounds(self) -> tuple[Size, Size]:
        return 0, max(self.size - 1, 0) if is_static(self.size) else self.size - 1


@dataclass(frozen=True)
class FloorDiv:
    arg: Expr
    divisor: Size

    def bounds(self) -> tuple[Size, Size]:
        lo, hi = self.arg.bounds()
        return floor_quotient(lo, self.divisor), floor_quotient(hi, self.divisor)


@dataclass(frozen=True)
class Mod:
    arg: Expr
    divisor: Size

    def bounds(self) -> tuple[Size, Size]:
        lo, hi = self.arg.bounds()
        if known_nonnegative(lo) and known_less(hi, self.divisor):
            return lo, hi
        return 0, self.divisor - 1


def _product(a: Size, b: Size) -> Size:
    return a * b if all_static((a, b)) else as_size(a * b)


Atom = Var | Indirect | FloorDiv | Mod


def _atom_key(atom: Atom) -> tuple:
    return (type(atom).__name__, str(atom))


class Expr:
    """An immutable affine form ``sum(coeff * atom) + const``."""

    __slots__ = ("_hash", "const", "terms")

    def __init__(self, terms: Mapping[Atom, Size] | None = None, const: Size = 0):
        items = {a: c if type(c) is int else as_size(c) for a, c in (terms or {}).items()}
        items = {a: c for a, c in items.items() if c != 0}
        self.terms: tuple[tuple[Atom, Size], ...] = tuple(
            sorted(items.items(), key=lambda item: _atom_key(item[0]))
        )
        self.const = const if type(const) is int else as_size(const)
        self._hash = hash((self.terms, self.const))

    # -- construction -------------------------------------------------------
    @staticmethod
    def of(value: Size | Atom | Expr) -> Expr:
        if isinstance(value, Expr):
            return value
        if isinstance(value, (int, sympy.Expr)):
            return Expr(None, value)
        return Expr({value: 1})

    def __add__(self, other: int | Expr) -> Expr:
        other = Expr.of(other)
        terms = dict(self.terms)
        for atom, coeff in other.terms:
            terms[atom] = terms.get(atom, 0) + coeff
        return _recombine(terms, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> Expr:
        return self * -1

    def __sub__(self, other: int | Expr) -> Expr:
        return self + (-Expr.of(other))

    def __rsub__(self, other: int | Expr) -> Expr:
        return Expr.of(other) - self

    def __mul__(self, k: Size) -> Expr:
        if not isinstance(k, (int, sympy.Expr)):
            raise TypeError(f"index expressions scale by sizes only, got {k!r}")
        return Expr({a: _product(c, k) for a, c in self.terms}, _product(self.const, k))

    __rmul__ = __mul__

    def floordiv(self, d: Size) -> Expr:
        q, r = self._split(d)
        if r is None:
            return q
        lo, hi = r.bounds()
        if known_nonnegative(lo) and known_less(hi, d):
            return q
        if isinstance(r.single_atom(), FloorDiv):
            inner = r.single_atom()
            return q + Expr.of(FloorDiv(inner.arg, _product(inner.divisor, d)))
        factored = r._factor_small(d)
        if factored is not None:  # r == g*big + small, 0 <= small < g, g | d
            g, big, _ = factored
            return q + big.floordiv(exact_quotient(d, g))
        return q + Expr.of(FloorDiv(r, d))

    def mod(self, d: Size) -> Expr:
        if d == 1:
            return Expr()
        _, r = self._split(d)
        if r is None:
            return Expr()
        lo, hi = r.bounds()
        if known_nonnegative(lo) and known_less(hi, d):
            return r
        factored = r._factor_small(d)
        if factored is not None:
            g, big, small = factored
            return big.mod(exact_quotient(d, g)) * g + small
        return Expr.of(Mod(r, d))

    def _factor_small(self, d: Size) -> tuple[int, Expr, Expr] | None:
        """``(g, big, small)`` with ``self == g*big + small``, ``g`` an int dividing ``d``, above
        1 and below ``d``, and ``0 <= small < g``: then ``self // d == big // (d/g)`` and
        ``self % d == g*(big % (d/g)) + small``. Merged loops make such indices,
        ``(128*o0 + o1) // 8192`` with ``o1 < 128``, which this turns into ``o0 // 64``, and
        with a symbolic size ``(o0 + 256*o1) // (256*s0)`` with ``o0 < 256``: ``o1 // s0``.
        The coefficients and the constant must be ints."""
        if not all_static((self.const, *(c for _, c in self.terms))):
            return None
        divisors = {gcd(c, d) for _, c in self.terms}
        for g in sorted((g for g in divisors if is_static(g) and 1 < g != d), reverse=True):
            big = Expr({a: c // g for a, c in self.terms if c % g == 0}, self.const // g)
            small = Expr({a: c for a, c in self.terms if c % g}, self.const % g)
            lo, hi = small.bounds()
            if known_nonnegative(lo) and known_less(hi, g):
                return g, big, small
        return None

    def _split(self, d: Size) -> tuple[Expr, Expr | None]:
        """``self == d*q + r`` with ``q`` exact; ``r`` holds what ``d`` does not divide."""
        if not known_positive_divisor(d):
            if all_static((d,)):
                raise ValueError(f"index divisor must be positive, got {d}")
            raise SymbolicUnsupported(f"an index divides by {d}, not proved positive")
        q_terms, r_terms = {}, {}
        for atom, coeff in self.terms:
            if divides(d, coeff):
                q_terms[atom] = exact_quotient(coeff, d)
            else:
                r_terms[atom] = coeff
        if all_static((self.const, d)):
            q_const, r_const = divmod(self.const, d)
        elif divides(d, self.const):
            q_const, r_const = exact_quotient(self.const, d), 0
        else:
            q_const, r_const = 0, self.const
        q = Expr(q_terms, q_const)
        rest = Expr(r_terms, r_const)
        if not rest.terms and rest.const == 0:
            return q, None
        return q, rest

    # -- queries --------------------------------------------------------------
    def bounds(self) -> tuple[Size, Size]:
        lo = hi = self.const
        for atom, coeff in self.terms:
            alo, ahi = atom.bounds()
            if known_nonnegative(coeff):
                lo, hi = lo + _product(coeff, alo), hi + _product(coeff, ahi)
            elif known_nonnegative(-coeff):
                lo, hi = lo + _product(coeff, ahi), hi + _product(coeff, alo)
            else:
                raise SymbolicUnsupported(f"the sign of the index coefficient {coeff} varies")
        return as_size(lo), as_size(hi)

    def single_atom(self) -> Atom | None:
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None

    def free_vars(self) -> set[Var]:
        found: set[Var] = set()
        for atom, _ in self.terms:
            if isinstance(atom, Var):
                found.add(atom)
            elif isinstance(atom, (FloorDiv, Mod)):
                found |= atom.arg.free_vars()
        return found

    def coefficient(self, var: Var) -> Size:
        return dict(self.terms).get(var, 0)

    def subs(self, mapping: Mapping[Atom, Expr]) -> Expr:
        """Replace variables by expressions (re-simplifying what they touch)."""
        out = Expr(None, self.const)
        for atom, coeff in self.terms:
            if atom in mapping:
                out = out + Expr.of(mapping[atom]) * coeff
            elif isinstance(atom, FloorDiv):
                out = out + atom.arg.subs(mapping).floordiv(atom.divisor) * coeff
            elif isinstance(atom, Mod):
                out = out + atom.arg.subs(mapping).mod(atom.divisor) * coeff
            else:
                out = out + Expr({atom: coeff})
        return out

    # -- printing -------------------------------------------------------------
    def render(
        self, name_of: Callable[[Atom], str] = lambda a: a.name, python: bool = False
    ) -> str:
        """C-style text (64-bit constants, ``/`` of non-negative operands), or Python/Triton
        text with ``python``; ``name_of`` names variables and indirect indices."""
        div, suffix = ("//", "") if python else ("/", "L")

        def size(value: Size, suffix: str = suffix) -> str:
            return f"{value}{suffix}" if is_static(value) else f"({size_text(value, python)})"

        parts = []
        for atom, coeff in self.terms:
            if isinstance(atom, FloorDiv):
                text = f"(({atom.arg.render(name_of, python)}) {div} {size(atom.divisor, '')})"
            elif isinstance(atom, Mod):
                text = f"(({atom.arg.render(name_of, python)}) % {size(atom.divisor, '')})"
            else:
                text = name_of(atom)
            parts.append(text if coeff == 1 else f"{size(coeff)}*{text}")
        if self.const != 0 or not parts:
            parts.append(size(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    def __str__(self) -> str:
        return self.render()

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            other = Expr.of(other)
        return isinstance(other, Expr) and self.terms == other.terms and self.const == other.const

    def __hash__(self) -> int:
        return self._hash


def _recombine(terms: dict[Atom, Size], const: Size) -> Expr:
    """Fold ``c*d*(x // d) + c*(x % d)`` back into ``c*x``. ``x // d`` is looked up as
    ``floordiv`` writes it, so nested quotients fold too: ``x // 784`` is ``(x // 28) // 28``,
    and ``100352*(x // 784) + 3584*((x // 28) % 28) + 128*(x % 28)`` (a flat index split over
    a channels-last tensor's dims) is ``128*x``."""
    changed = True
    while changed:
        changed = False
        for atom, coeff in list(terms.items()):
            if not isinstance(atom, Mod) or coeff == 0:
                continue
            partner = atom.arg.floordiv(atom.divisor).single_atom()
            if partner is not None and terms.get(partner, 0) == _product(coeff, atom.divisor):
                del terms[atom], terms[partner]
                for a, c in atom.arg.terms:
                    terms[a] = as_size(terms.get(a, 0) + _product(c, coeff))
                const = as_size(const + _product(atom.arg.const, coeff))
                changed = True
                break
    return Expr(terms, const)


def make_vars(prefix: str, sizes: Iterable[Size]) -> list[Expr]:
    """One loop variable per size; size-1 dimensions get the constant 0."""
    return [Expr.of(Var(f"{prefix}{i}", s)) if s != 1 else Expr() for i, s in enumerate(sizes)]


def contiguous_strides(sizes: Iterable[Size]) -> tuple[Size, ...]:
    strides, acc = [], 1
    for s in reversed(tuple(sizes)):
        strides.append(acc)
        acc = _product(acc, max(s, 1) if is_static(s) else s)  # symbolic sizes are >= 2
    return tuple(reversed(strides))


def linear_index(index: Iterable[Expr], strides: Iterable[Size], offset: Size = 0) -> Expr:
    out = Expr.of(offset)
    for idx, st in zip(index, strides):
        out = out + idx * st
    return out


def unflatten(flat: Expr, sizes: Iterable[Size]) -> list[Expr]:
    """Split a row-major flat index into one index per dimension of ``sizes``."""
    sizes = tuple(sizes)
    strides = contiguous_strides(sizes)
    return [
        flat.floordiv(st).mod(sz) if not is_static(sz) or sz > 1 else Expr()
        for st, sz in zip(strides, sizes)
    ]
