"""Spec (issue 17, item 7): builtins and strings are computed at capture time and the graph
keeps only the tensor ops, in one graph, as torch.compile traces them.

Each case runs with ``fullgraph=True`` and is compared with eager on fresh random inputs
(outputs and mutated arguments), one graph on the first call and none after.
"""

import cmath
import collections.abc
import math
import numbers

import pytest
import torch

from kiln_testing import check_compiled

CASES = []


def case(make_args):
    """Registers the decorated function as a spec case called on ``make_args()``."""

    def register(fn):
        CASES.append(pytest.param(fn, make_args, id=fn.__name__))
        return fn

    return register


def one():
    return (torch.randn(3),)


def named():
    return (torch.randn(2, 3), "Layer_norm.weight")


class Holder:
    def __init__(self):
        self.scale = 2.0

    def double(self, t):
        return t * 2


def with_holder():
    return (torch.randn(3), Holder())


# -- strings ---------------------------------------------------------------------------


@case(named)
def str_methods(x, name):
    parts = name.lower().split(".")
    key = "_".join(p.strip("_") for p in parts).replace("norm", "n")
    head, sep, tail = name.partition(".")
    flags = (
        name.startswith(("Layer", "Conv")),
        name.endswith("weight"),
        name.find("norm"),
        name.count("e"),
        "12".isdigit(),
        name.title(),
        name.casefold(),
        "7".zfill(3),
        "a\nb".splitlines(),
        name.rjust(20, "-"),
        name.upper().isupper(),
    )
    return x * len(key), key, head, sep, tail, flags


@case(named)
def fstrings(x, name):
    rows, cols = x.shape
    return x + rows, f"{name}:{rows:03d}x{cols}", f"{x.shape[1] / 7:.2f}", f"{name!r:>30}"


@case(named)
def percent_formatting(x, name):
    named_value = "%(a)s" % {"a": 1}  # noqa: UP031 (the spec case)
    return x * 2, "%s_%d" % (name, x.shape[0]), "%.3f" % (x.shape[1] / 7), named_value  # noqa: UP031


@case(named)
def format_calls(x, name):
    return (
        x - 1,
        "{}-{}".format(name, x.shape[0]),  # noqa: UP032 (the spec case)
        "{n}/{d:>4}".format(n=name, d=x.dim()),  # noqa: UP032
        format(math.pi, ".2f"),
        format(x.shape[1], "b"),
    )


@case(named)
def in_on_strings(x, name):
    if "norm" in name and "bias" not in name:
        return x.sum(0)
    return x.mean(0)


# -- type checks and attributes --------------------------------------------------------


@case(one)
def isinstance_with_tuples_and_abcs(x):
    checks = (
        isinstance(x, (list, torch.Tensor)),
        isinstance([x], collections.abc.Sequence),
        isinstance({"a": x}, collections.abc.Mapping),
        isinstance(3, numbers.Number),
        isinstance(2.5, (int, numbers.Integral)),
        isinstance((x,), collections.abc.Iterable),
        isinstance("s", (bytes, str)),
    )
    return x * sum(checks), checks


@case(one)
def issubclass_with_tuples_and_abcs(x):
    checks = (
        issubclass(type(x), torch.Tensor),
        issubclass(bool, (str, int)),
        issubclass(dict, collections.abc.Mapping),
        issubclass(torch.nn.Linear, torch.nn.Module),
        issubclass(list, collections.abc.Hashable),
    )
    return x + sum(checks), checks


@case(with_holder)
def callable_checks(x, holder):
    checks = (callable(holder.double), callable(x), callable(torch.sin), callable(3), callable(len))
    return x * sum(checks), checks


@case(with_holder)
def getattr_with_default_and_hasattr(x, holder):
    scale = getattr(holder, "scale", 1.0)
    shift = getattr(holder, "shift", 0.5)
    shape = getattr(x, "shape")  # noqa: B009 (the spec case)
    flags = hasattr(holder, "scale"), hasattr(holder, "missing"), hasattr(x, "grad")
    return x * scale + shift + len(shape), flags


# -- sorting and reductions over generators -------------------------------------------


@case(one)
def sorted_constants(x):
    dims = sorted([2, 0, 1], reverse=True)
    keys = sorted({"b": 1, "a": 2})
    return x.unsqueeze(0).unsqueeze(0).permute(*dims), keys, sorted("cab")


@case(lambda: ([torch.randn(2, 3), torch.randn(4), torch.randn(1, 1, 2)],))
def reductions_over_generators(xs):
    biggest = max(t.dim() for t in xs)
    smallest = min((t.numel() for t in xs), default=0)
    longest = max(xs, key=lambda t: t.numel())
    total = sum(t.sum() for t in xs)
    offset = sum((t.dim() for t in xs), 10)
    flags = any(t.dim() > 2 for t in xs), all(t.numel() > 1 for t in xs)
    return total * biggest + smallest + offset, longest * 2, flags


# -- numbers ---------------------------------------------------------------------------


@case(one)
def math_on_constants(x):
    n = x.shape[0]
    scale = math.sqrt(n) * math.log(n) + math.exp(1) + math.cos(math.pi) + math.log2(8)
    ints = math.prod([n, 2]), math.gcd(12, 18), math.comb(5, 2), math.factorial(4), math.trunc(2.7)
    checks = math.isclose(0.1 + 0.2, 0.3), math.isfinite(math.inf), math.isnan(math.nan)
    more = math.hypot(3, 4), math.fsum([0.1] * 10), math.copysign(2, -1), math.floor(2.5)
    return x * scale, ints, checks, more


@case(one)
def cmath_on_constants(x):
    z = cmath.sqrt(-4) + cmath.exp(1j * cmath.pi)
    r, phi = cmath.polar(1 + 1j)
    return x * abs(z) + r + phi + cmath.phase(-1), z


@case(one)
def int_float_conversions(x):
    n = x.shape[0]
    values = int("12"), int(3.9), float("1.5"), int(n / 2), float(n), int("ff", 16), bool(0)
    return x * values[3] + values[4], values, str(n), repr(2.5)


@case(one)
def divmod_round_abs_hash(x):
    q, r = divmod(x.shape[0] + 4, 3)
    values = round(2.567, 2), round(x.shape[0] / 2), abs(-3), abs(-2.5), round(7.5)
    same = hash("abc") == hash("abc"), hash((1, 2)) == hash((1, 2)), hash(3)
    return x * q + r, values, same


@pytest.mark.parametrize(("fn", "make_args"), CASES)
def test_traced_in_one_graph(fn, make_args, backend):
    check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)
