"""Spec (issue 17, item 3): generators, ``itertools``, ``functools``, ``operator`` and the
iteration builtins are traced in one graph, as torch.compile traces them.

Each case runs with ``fullgraph=True`` and is compared with eager on fresh random inputs
(outputs and mutated arguments), one graph on the first call and none after.
"""

import functools
import itertools
import operator
import re

import pytest
import torch

import torchkiln
from kiln_testing import check_compiled
from torchkiln.exc import Unsupported

CASES = []
#: Cases torch.compile traces that need exception handling inside traced code (issue 17 item
#: 4): capture stops, naming why, and the frame runs eagerly.
BREAKS = []


def case(make_args, breaks=None):
    """Registers the decorated function as a spec case called on ``make_args()``; ``breaks``
    is what ``Unsupported`` must say for a case that breaks the graph."""

    def register(fn):
        param = pytest.param(fn, make_args, id=fn.__name__)
        (CASES if breaks is None else BREAKS).append(
            param if breaks is None else (*param.values, breaks)
        )
        return fn

    return register


def one():
    return (torch.randn(3),)


def many():
    return ([torch.randn(3) for _ in range(4)],)


# -- generators ------------------------------------------------------------------------


def squares(xs):
    for t in xs:
        yield t * t


def numbers_from(start):
    n = start
    while True:
        yield n
        n += 1


def inner_then_total(x):
    yield x + 1
    yield x + 2
    return 10


def delegating(x):
    total = yield from inner_then_total(x)
    yield x * total


def running_total(x):
    total = x
    while True:
        step = yield total
        total = total + step


def guarded_counter(x):
    try:
        yield x
        yield x * 2
    finally:
        x.add_(1)


def recovering(x):
    while True:
        try:
            yield x
        except ValueError:
            x = x * 10


@case(many)
def generator_into_list(xs):
    return list(squares(xs))


@case(one)
def generator_stopping_early(x):
    def first_two(t):
        yield t
        yield t + 1
        return
        yield t + 2  # unreachable

    return tuple(first_two(x))


@case(one)
def infinite_generator_consumed_partly(x):
    gen = numbers_from(2)
    return [x * next(gen) for _ in range(3)], next(gen)


@case(one)
def infinite_generator_zipped_with_a_range(x):
    return [x * i + j for i, j in zip(range(3), numbers_from(5))]


@case(one)
def yield_from_with_its_return_value(x):
    return list(delegating(x))


@case(one)
def generator_send(x):
    gen = running_total(x)
    first = next(gen)
    second = gen.send(x * 2)
    third = gen.send(torch.ones(3))
    return first, second, third


@case(one)
def generator_close_runs_finally(x):
    gen = guarded_counter(x)
    first = next(gen)
    gen.close()
    return first * 1, x


@case(one)
def generator_close_before_start(x):
    gen = squares([x, x])
    gen.close()
    return list(gen), x + 1


@case(one)
def generator_throw_caught_inside(x):
    gen = recovering(x)
    first = next(gen)
    second = gen.throw(ValueError("again"))
    return first, second


def delegating_to_recovering(x):
    yield from recovering(x)


@case(one, breaks="throw() into a generator suspended in yield from")
def generator_throw_through_yield_from(x):
    gen = delegating_to_recovering(x)
    first = next(gen)
    return first, gen.throw(ValueError("again"))


@case(many)
def generator_expression_into_enumerate(xs):
    return [i * t for i, t in enumerate(t + 1 for t in xs)]


# -- itertools --------------------------------------------------------------------------


@case(many)
def itertools_product(xs):
    return [a * b for a, b in itertools.product(xs[:2], xs[2:])]


@case(one)
def itertools_product_repeat(x):
    return [x * (i - j) for i, j in itertools.product(range(2), repeat=2)]


@case(many)
def itertools_chain(xs):
    return sum(itertools.chain(xs[:2], [xs[3]], (t * 2 for t in xs[2:])))


@case(many)
def itertools_chain_from_iterable(xs):
    pairs = [(xs[0], xs[1]), (xs[2], xs[3])]
    return [t * 2 for t in itertools.chain.from_iterable(pairs)]


@case(many)
def itertools_accumulate(xs):
    return list(itertools.accumulate(xs)), list(itertools.accumulate(xs, torch.maximum))


@case(many)
def itertools_accumulate_initial(xs):
    return list(itertools.accumulate(xs, operator.mul, initial=torch.ones(3)))


@case(many)
def itertools_islice(xs):
    return sum(itertools.islice(xs, 1, None, 2)), [t + 1 for t in itertools.islice(xs, 2)]


@case(one)
def itertools_islice_of_an_infinite_generator(x):
    return [x * n for n in itertools.islice(numbers_from(0), 2, 5)]


@case(many)
def itertools_count(xs):
    return [t * c for t, c in zip(xs, itertools.count(3, 2))]


@case(many)
def itertools_repeat(xs):
    return list(map(operator.add, xs, itertools.repeat(xs[0]))), list(itertools.repeat(2.0, 3))


@case(many)
def itertools_zip_longest(xs):
    return [a * b for a, b in itertools.zip_longest(xs, xs[:2], fillvalue=1.0)]


@case(many)
def itertools_groupby(xs):
    shapes = [t.dim() for t in xs] + [2, 2, 1]
    return [(k, len(list(g))) for k, g in itertools.groupby(shapes)], [
        (k, sum(g)) for k, g in itertools.groupby(xs, key=lambda t: t.shape[0])
    ]


@case(many)
def itertools_pairwise(xs):
    return [b - a for a, b in itertools.pairwise(xs)]


@case(many)
def itertools_combinations(xs):
    return [a * b for a, b in itertools.combinations(xs, 2)]


@case(many)
def itertools_permutations(xs):
    return [a - b for a, b in itertools.permutations(xs[:3], 2)]


# -- functools ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def cached_scale(n):
    return n * 0.5 + 1


@case(many)
def functools_reduce(xs):
    return functools.reduce(operator.add, xs), functools.reduce(lambda a, b: a * b, xs, 2.0)


@case(one)
def functools_partial_made_inside(x):
    scale = functools.partial(torch.mul, other=3.0)
    shift = functools.partial(operator.add, 1.0)
    return scale(x), shift(x), scale.keywords["other"]


SQUARE = functools.partial(torch.pow, exponent=2)


@case(one)
def functools_partial_global(x):
    return SQUARE(x)


@case(one)
def functools_lru_cached_function(x):
    return x * cached_scale(x.shape[0]) + cached_scale(4)


# -- operator ------------------------------------------------------------------------------


@case(many)
def operator_functions(xs):
    a, b = xs[0], xs[1]
    return (
        operator.add(a, b),
        operator.mul(a, 2),
        operator.neg(a),
        operator.getitem(xs, 2),
        operator.truediv(a, b.abs() + 1),
        operator.not_(len(xs) > 3),
        operator.contains([1, 2], 2),
        operator.index(3),
    )


@case(many)
def operator_attrgetter(xs):
    shape_of = operator.attrgetter("shape")
    both = operator.attrgetter("dtype", "shape")
    return shape_of(xs[0]), both(xs[1]), xs[0] * len(shape_of(xs[2]))


@case(many)
def operator_itemgetter(xs):
    second = operator.itemgetter(1)
    ends = operator.itemgetter(0, -1)
    return second(xs) * 2, ends(xs), sorted({"a": 3, "b": 1}.items(), key=second)


@case(many)
def operator_methodcaller(xs):
    total = operator.methodcaller("sum", dim=0)
    return [total(t) for t in xs], operator.methodcaller("upper")("ab")


# -- builtins over iterables ---------------------------------------------------------------


@case(many)
def zip_strict(xs):
    return [a + i for a, i in zip(xs, range(4), strict=True)]


@case(many)
def enumerate_with_start(xs):
    return [t * i for i, t in enumerate(xs, start=1)], list(enumerate("ab", 5))


@case(many)
def reversed_sequences(xs):
    return list(reversed(xs)), list(reversed(range(3))), [t * 2 for t in reversed(xs[1:])]


@case(many)
def sorted_with_key(xs):
    by_len = sorted(["ccc", "a", "bb"], key=len, reverse=True)
    by_size = sorted([*xs, xs[0][:1]], key=lambda t: t.numel())
    return by_len, by_size


@pytest.mark.parametrize(("fn", "make_args"), CASES)
def test_traced_in_one_graph(fn, make_args, backend):
    check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


@pytest.mark.parametrize(
    ("fn", "make_args", "reason"), BREAKS, ids=lambda v: getattr(v, "__name__", "")
)
def test_breaks_cleanly(fn, make_args, reason, backend):
    with pytest.raises(Unsupported, match=re.escape(reason)):
        torchkiln.compile(fn, backend=backend, fullgraph=True)(*make_args())
    torchkiln.reset()  # without fullgraph: the frame runs eagerly, the reason counted
    check_compiled(fn, make_args, backend=backend, graphs=0)
    assert any(reason in r for r in torchkiln.counters["eager_fallback"])


def test_a_global_partial_made_with_other_arguments_recompiles(backend):
    """What a partial was made with is read through ``args``/``keywords``: guarded."""
    global SCALED
    SCALED = functools.partial(torch.add, 2.0)

    def fn(x):
        return SCALED(x)

    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 2)
    SCALED = functools.partial(torch.add, 2.0, alpha=3)
    torch.testing.assert_close(compiled(x), 2.0 + 3 * x)
