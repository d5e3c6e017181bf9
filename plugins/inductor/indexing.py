"""Integer index expressions of the loop IR: affine forms over loop variables.

Shapes are static, so an index is ``sum(coeff * atom) + const`` with integer
coefficients. Atoms are loop variables (``Var``, with their range), values
loaded at run time (``Indirect``, for gather/index), and ``FloorDiv``/``Mod``
of a sub-expression by a positive constant (what reshapes of computed values
need). Construction simplifies with the ranges of the variables, so views
compose into the plain strided index whenever one exists:
``1024 * ((1024*i + j) // 1024) + (1024*i + j) % 1024`` is ``1024*i + j``.
Every ``FloorDiv``/``Mod`` operand is non-negative, so C's ``/`` and ``%``
print them correctly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Var:
    """A loop variable ranging over ``[0, size)``."""

    name: str
    size: int

    def bounds(self) -> tuple[int, int]:
        return 0, self.size - 1


@dataclass(frozen=True)
class Indirect:
    """An index read from a tensor at run time, already wrapped into ``[0, size)``."""

    name: str
    size: int

    def bounds(self) -> tuple[int, int]:
        return 0, max(self.size - 1, 0)


@dataclass(frozen=True)
class FloorDiv:
    arg: Expr
    divisor: int

    def bounds(self) -> tuple[int, int]:
        lo, hi = self.arg.bounds()
        return lo // self.divisor, hi // self.divisor


@dataclass(frozen=True)
class Mod:
    arg: Expr
    divisor: int

    def bounds(self) -> tuple[int, int]:
        lo, hi = self.arg.bounds()
        if lo >= 0 and hi < self.divisor:
            return lo, hi
        return 0, self.divisor - 1


Atom = Var | Indirect | FloorDiv | Mod


def _atom_key(atom: Atom) -> tuple:
    return (type(atom).__name__, str(atom))


class Expr:
    """An immutable affine form ``sum(coeff * atom) + const``."""

    __slots__ = ("_hash", "const", "terms")

    def __init__(self, terms: Mapping[Atom, int] | None = None, const: int = 0):
        items = {a: c for a, c in (terms or {}).items() if c != 0}
        self.terms: tuple[tuple[Atom, int], ...] = tuple(
            sorted(items.items(), key=lambda item: _atom_key(item[0]))
        )
        self.const = int(const)
        self._hash = hash((self.terms, self.const))

    # -- construction -------------------------------------------------------
    @staticmethod
    def of(value: int | Atom | Expr) -> Expr:
        if isinstance(value, Expr):
            return value
        if isinstance(value, int):
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

    def __mul__(self, k: int) -> Expr:
        if not isinstance(k, int):
            raise TypeError(f"index expressions scale by integers only, got {k!r}")
        return Expr({a: c * k for a, c in self.terms}, self.const * k)

    __rmul__ = __mul__

    def floordiv(self, d: int) -> Expr:
        q, r = self._split(d)
        if r is None:
            return q
        lo, hi = r.bounds()
        if lo >= 0 and hi < d:
            return q
        if isinstance(r.single_atom(), FloorDiv):
            inner = r.single_atom()
            return q + Expr.of(FloorDiv(inner.arg, inner.divisor * d))
        factored = r._factor_small(d)
        if factored is not None:  # r == g*big + small, 0 <= small < g, g | d
            g, big, _ = factored
            return q + big.floordiv(d // g)
        return q + Expr.of(FloorDiv(r, d))

    def mod(self, d: int) -> Expr:
        if d == 1:
            return Expr()
        _, r = self._split(d)
        if r is None:
            return Expr()
        lo, hi = r.bounds()
        if lo >= 0 and hi < d:
            return r
        factored = r._factor_small(d)
        if factored is not None:
            g, big, small = factored
            return big.mod(d // g) * g + small
        return Expr.of(Mod(r, d))

    def _factor_small(self, d: int) -> tuple[int, Expr, Expr] | None:
        """``(g, big, small)`` with ``self == g*big + small``, ``g`` a divisor of ``d`` above 1
        and ``0 <= small < g``: then ``self // d == big // (d/g)`` and
        ``self % d == g*(big % (d/g)) + small``. Merged loops make such indices,
        ``(128*o0 + o1) // 8192`` with ``o1 < 128``, which this turns into ``o0 // 64``."""
        for g in sorted({math.gcd(c, d) for _, c in self.terms} - {1, d}, reverse=True):
            big = Expr({a: c // g for a, c in self.terms if c % g == 0}, self.const // g)
            small = Expr({a: c for a, c in self.terms if c % g}, self.const % g)
            lo, hi = small.bounds()
            if lo >= 0 and hi < g:
                return g, big, small
        return None

    def _split(self, d: int) -> tuple[Expr, Expr | None]:
        """``self == d*q + r`` with ``q`` exact; ``r`` holds what ``d`` does not divide."""
        if d <= 0:
            raise ValueError(f"index divisor must be positive, got {d}")
        q_terms, r_terms = {}, {}
        for atom, coeff in self.terms:
            if coeff % d == 0:
                q_terms[atom] = coeff // d
            else:
                r_terms[atom] = coeff
        q = Expr(q_terms, self.const // d)
        rest = Expr(r_terms, self.const % d)
        if not rest.terms and rest.const == 0:
            return q, None
        return q, rest

    # -- queries --------------------------------------------------------------
    def bounds(self) -> tuple[int, int]:
        lo = hi = self.const
        for atom, coeff in self.terms:
            alo, ahi = atom.bounds()
            if coeff >= 0:
                lo, hi = lo + coeff * alo, hi + coeff * ahi
            else:
                lo, hi = lo + coeff * ahi, hi + coeff * alo
        return lo, hi

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

    def coefficient(self, var: Var) -> int:
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
        parts = []
        for atom, coeff in self.terms:
            if isinstance(atom, FloorDiv):
                text = f"(({atom.arg.render(name_of, python)}) {div} {atom.divisor})"
            elif isinstance(atom, Mod):
                text = f"(({atom.arg.render(name_of, python)}) % {atom.divisor})"
            else:
                text = name_of(atom)
            parts.append(text if coeff == 1 else f"{coeff}{suffix}*{text}")
        if self.const or not parts:
            parts.append(f"{self.const}{suffix}")
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


def _recombine(terms: dict[Atom, int], const: int) -> Expr:
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
            if partner is not None and terms.get(partner, 0) == coeff * atom.divisor:
                del terms[atom], terms[partner]
                for a, c in atom.arg.terms:
                    terms[a] = terms.get(a, 0) + c * coeff
                const += atom.arg.const * coeff
                changed = True
                break
    return Expr(terms, const)


def make_vars(prefix: str, sizes: Iterable[int]) -> list[Expr]:
    """One loop variable per size; size-1 dimensions get the constant 0."""
    return [Expr.of(Var(f"{prefix}{i}", s)) if s != 1 else Expr() for i, s in enumerate(sizes)]


def contiguous_strides(sizes: Iterable[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(tuple(sizes)):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def linear_index(index: Iterable[Expr], strides: Iterable[int], offset: int = 0) -> Expr:
    out = Expr.of(offset)
    for idx, st in zip(index, strides):
        out = out + idx * st
    return out


def unflatten(flat: Expr, sizes: Iterable[int]) -> list[Expr]:
    """Split a row-major flat index into one index per dimension of ``sizes``."""
    sizes = tuple(sizes)
    strides = contiguous_strides(sizes)
    return [flat.floordiv(st).mod(sz) if sz > 1 else Expr() for st, sz in zip(strides, sizes)]
