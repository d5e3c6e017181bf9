"""Pure-Python stand-ins for C iteration helpers, inlined where the frame calls the C one.

``itertools``, ``functools.reduce`` and ``operator``'s getters are written in C, so
the translator cannot step through them; these functions do the same steps in
Python (the equivalents the Python documentation gives, without ``try``), and
the translator inlines them as it inlines user code: lazily, item by item, so
tensors flow into the graph and side effects keep Python's order. Each consumes
its arguments when the C function does (``tuple(pool)`` and ``iter()`` at the
call, the rest when an item is asked for), hence the eager wrapper around a
generator. ``POLYFILLS`` maps each C callable to its stand-in.

Index arithmetic over constant ranges is left to the real ``itertools``
(``FOLDED``): the translator computes it at capture time.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
from typing import Any


def chain(*iterables: Any) -> Any:
    for iterable in iterables:
        yield from iterable


def chain_from_iterable(iterables: Any) -> Any:
    return chain_lazily(iter(iterables))


def chain_lazily(iterables: Any) -> Any:
    for iterable in iterables:
        yield from iterable


def count(start: Any = 0, step: Any = 1) -> Any:
    n = start
    while True:
        yield n
        n += step


def repeat(value: Any, times: Any = None) -> Any:
    if times is None:
        return repeat_forever(value)
    return (value for _ in range(times))


def repeat_forever(value: Any) -> Any:
    while True:
        yield value


def islice(iterable: Any, *args: Any) -> Any:
    bounds = slice(*args)
    start = 0 if bounds.start is None else bounds.start
    step = 1 if bounds.step is None else bounds.step
    if start < 0 or (bounds.stop is not None and bounds.stop < 0) or step <= 0:
        raise ValueError("islice() bounds must be None or non-negative integers, step positive")
    return islice_from(iter(iterable), start, bounds.stop, step)


def islice_from(iterator: Any, start: Any, stop: Any, step: Any) -> Any:
    indices = count() if stop is None else range(max(start, stop))
    wanted = start
    for i, element in zip(indices, iterator):
        if i == wanted:
            yield element
            wanted += step


def accumulate(iterable: Any, func: Any = None, *, initial: Any = None) -> Any:
    return accumulate_from(iter(iterable), func, initial)


def accumulate_from(iterator: Any, func: Any, initial: Any) -> Any:
    total = initial
    if initial is None:
        for total in iterator:  # noqa: B007 (the first item, or none)
            break
        else:
            return
    yield total
    for element in iterator:
        total = total + element if func is None else func(total, element)
        yield total


def zip_longest(*iterables: Any, fillvalue: Any = None) -> Any:
    return zip_longest_from([iter(it) for it in iterables], fillvalue)


def zip_longest_from(iterators: list, fillvalue: Any) -> Any:
    alive = [True] * len(iterators)
    while iterators:
        values = []
        for i, iterator in enumerate(iterators):
            value = fillvalue
            if alive[i]:
                for value in iterator:  # noqa: B007 (the next item, or none)
                    break
                else:
                    alive[i] = False
                    if not any(alive):
                        return
                    value = fillvalue
            values.append(value)
        yield tuple(values)


def pairwise(iterable: Any) -> Any:
    return pairwise_from(iter(iterable))


def pairwise_from(iterator: Any) -> Any:
    for a in iterator:
        for b in iterator:
            yield a, b
            a = b
        return


#: ``groupby``'s shared state, as C keeps it: target key, current key, current value, the
#: number of the live group, and whether each of the three values is set.
TARGET, KEY, VALUE, GROUP, HAS_TARGET, HAS_KEY, HAS_VALUE = range(7)


def groupby(iterable: Any, key: Any = None) -> Any:
    return groupby_from(iter(iterable), key, [None, None, None, 0, False, False, False])


def groupby_step(iterator: Any, keyfunc: Any, state: list) -> bool:
    for value in iterator:
        state[KEY] = value if keyfunc is None else keyfunc(value)
        state[VALUE] = value
        state[HAS_KEY] = state[HAS_VALUE] = True
        return True
    return False


def groupby_from(iterator: Any, keyfunc: Any, state: list) -> Any:
    while True:
        state[GROUP] += 1  # the previous group's iterator yields nothing more
        while not state[HAS_KEY] or (
            state[HAS_TARGET] and (state[TARGET] is state[KEY] or state[TARGET] == state[KEY])
        ):
            if not groupby_step(iterator, keyfunc, state):
                return
        state[TARGET], state[HAS_TARGET] = state[KEY], True
        yield state[KEY], grouper(iterator, keyfunc, state, state[TARGET], state[GROUP])


def grouper(iterator: Any, keyfunc: Any, state: list, target: Any, group: int) -> Any:
    while state[GROUP] == group:
        if not state[HAS_VALUE] and not groupby_step(iterator, keyfunc, state):
            return
        if not (target is state[KEY] or target == state[KEY]):
            return
        value, state[VALUE], state[HAS_VALUE] = state[VALUE], None, False
        yield value


def product(*iterables: Any, repeat: int = 1) -> Any:
    pools = [tuple(pool) for pool in iterables] * repeat
    return (
        tuple(pool[i] for pool, i in zip(pools, indices))
        for indices in itertools.product(*[range(len(pool)) for pool in pools])
    )


def combinations(iterable: Any, r: int) -> Any:
    pool = tuple(iterable)
    return (
        tuple(pool[i] for i in indices) for indices in itertools.combinations(range(len(pool)), r)
    )


def permutations(iterable: Any, r: Any = None) -> Any:
    pool = tuple(iterable)
    return (
        tuple(pool[i] for i in indices) for indices in itertools.permutations(range(len(pool)), r)
    )


def reduce(function: Any, iterable: Any, *initial: Any) -> Any:
    iterator = iter(iterable)
    if initial:
        (value,) = initial
    else:
        for value in iterator:  # noqa: B007 (the first item, or none)
            break
        else:
            raise TypeError("reduce() of empty iterable with no initial value")
    for element in iterator:
        value = function(value, element)
    return value


def attrgetter(attr: str, *attrs: str) -> Any:
    if attrs:
        getters = [attrgetter(name) for name in (attr, *attrs)]
        return lambda obj: tuple(get(obj) for get in getters)
    names = attr.split(".")

    def get(obj: Any) -> Any:
        for name in names:
            obj = getattr(obj, name)
        return obj

    return get


def itemgetter(item: Any, *items: Any) -> Any:
    if items:
        keys = (item, *items)
        return lambda obj: tuple(obj[key] for key in keys)
    return lambda obj: obj[item]


def methodcaller(name: str, *args: Any, **kwargs: Any) -> Any:
    return lambda obj: getattr(obj, name)(*args, **kwargs)


def dict_fromkeys(iterable: Any, value: Any = None, /) -> Any:
    return fill_keys({}, iterable, value)


def defaultdict_fromkeys(iterable: Any, value: Any = None, /) -> Any:
    return fill_keys(collections.defaultdict(), iterable, value)


def ordereddict_fromkeys(iterable: Any, value: Any = None) -> Any:
    return fill_keys(collections.OrderedDict(), iterable, value)


def fill_keys(made: Any, iterable: Any, value: Any) -> Any:
    """``cls.fromkeys``: ``cls()``, then each key set to ``value`` in the iterable's order."""
    for key in iterable:
        made[key] = value
    return made


POLYFILLS: dict[Any, Any] = {
    dict.fromkeys: dict_fromkeys,
    dict.__dict__["fromkeys"]: dict_fromkeys,
    collections.defaultdict.fromkeys: defaultdict_fromkeys,
    collections.OrderedDict.fromkeys: ordereddict_fromkeys,
    collections.OrderedDict.__dict__["fromkeys"]: ordereddict_fromkeys,
    itertools.chain: chain,
    itertools.chain.__dict__["from_iterable"]: chain_from_iterable,
    itertools.chain.from_iterable: chain_from_iterable,
    itertools.count: count,
    itertools.repeat: repeat,
    itertools.islice: islice,
    itertools.accumulate: accumulate,
    itertools.zip_longest: zip_longest,
    itertools.pairwise: pairwise,
    itertools.groupby: groupby,
    itertools.product: product,
    itertools.combinations: combinations,
    itertools.permutations: permutations,
    functools.reduce: reduce,
    operator.attrgetter: attrgetter,
    operator.itemgetter: itemgetter,
    operator.methodcaller: methodcaller,
}

#: Finite iterators over constants that capture time computes with the real function.
FOLDED = frozenset({itertools.product, itertools.combinations, itertools.permutations})

#: ``operator``'s getter objects: ``__reduce__`` gives the arguments they were made with.
GETTER_TYPES = (operator.attrgetter, operator.itemgetter, operator.methodcaller)


def stand_in(fn: Any) -> Any:
    """The Python stand-in for ``fn``, or None (``fn`` may be unhashable)."""
    try:
        return POLYFILLS.get(fn)
    except TypeError:
        return None


def getter_arguments(getter: Any) -> tuple[Any, tuple, dict]:
    """``(class, args, kwargs)`` an ``operator`` getter object was made with."""
    make, args = getter.__reduce__()[:2]
    if isinstance(make, functools.partial):  # ``methodcaller`` with keyword arguments
        return make.func, (*make.args, *args), dict(make.keywords)
    return make, args, {}
