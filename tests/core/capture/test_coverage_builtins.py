"""Spec (issue 17, capture coverage): ``dict()`` over every argument kind, sequence ``+``/``*``,
``fromkeys``, ``dict.update`` with pairs, and dicts keyed by tensors and objects, traced in
one graph.

Each case runs with ``fullgraph=True`` on fresh random inputs and is compared with eager
(outputs, mutated arguments) by ``check_compiled``, which also counts graphs and breaks.
"""

import collections
from collections.abc import MutableMapping
from typing import NamedTuple

import torch

import torchkiln
from kiln_testing import check_compiled


def tensors(*shapes):
    return lambda: tuple(torch.randn(*s) for s in shapes)


def one_graph(fn, make_args, backend):
    return check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


# -- dict() ----------------------------------------------------------------------------------


class Store(MutableMapping):
    """A mapping that is no dict: ``dict(store)`` reads ``keys()`` and ``store[key]``."""

    def __init__(self):
        self._data = {}

    def __getitem__(self, key):
        return self._data[key]

    def __setitem__(self, key, value):
        self._data[key] = value

    def __delitem__(self, key):
        del self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


STORE = Store()
STORE["ab"] = torch.full((3,), 2.0)  # two-character keys: never read as (key, value) pairs
STORE["cd"] = torch.full((3,), 3.0)


def dict_of_mapping(x):
    copy = dict(STORE, e=x)
    return copy["ab"] * x + copy["cd"] - copy["e"], list(copy)


def test_dict_of_a_mapping_reads_its_keys(backend):
    one_graph(dict_of_mapping, tensors((3,)), backend)


def dict_of_pairs(x):
    d = dict(["ab", ("c", x), ["d", x + 1]], z=x * 2)  # a 2-character string is a pair
    e = dict(zip("xy", (x - 1, x + 2)))
    f = collections.OrderedDict({"p": x}.items())
    g = dict([(x, 2)])  # a tensor key
    return d["a"], d["c"] + d["d"] * d["z"], e["x"] * e["y"] + g[x], f, list(d)


def test_dict_of_pairs_and_keywords(backend):
    one_graph(dict_of_pairs, tensors((3,)), backend)


def dict_of_bad_pair(x):
    try:
        dict([("a", x, x)])
    except ValueError as e:
        return x + 1, e.args
    return x - 1, ()


def test_dict_pair_of_three_raises_value_error(backend):
    one_graph(dict_of_bad_pair, tensors((3,)), backend)


# -- sequence + and * -----------------------------------------------------------------------


def sequence_arithmetic(x, lst):
    t = () + (x, x + 1) + (None,)  # noqa: RUF005 (``()``, ``(None,)``: constants in the bytecode)
    repeated = 3 * [x] + [x + 1] * 2
    pair = (x,) * 2
    lst += (x * 2,)  # a list's += takes any iterable
    lst *= 2
    return t[0] + t[1], sum(repeated), pair[1], len(lst), t[2]


def test_sequence_concatenation_and_repetition(backend):
    one_graph(sequence_arithmetic, lambda: (torch.randn(3), [torch.randn(3)]), backend)


# -- fromkeys and update ----------------------------------------------------------------------


def from_keys(x, y):
    d = dict.fromkeys(["a", "b"])
    d1 = dict.fromkeys(d, x + 1)
    d2 = collections.defaultdict.fromkeys(iter(d1), x - 2)
    d3 = collections.OrderedDict.fromkeys(("a", "b"), value=y)
    return d1["a"] * d2["b"] + d3["a"], d["b"], d2, d3


def test_fromkeys(backend):
    one_graph(from_keys, tensors((3,), (3,)), backend)


def update_with_pairs(x, y, d):
    d.update([("b", y + 1), ["c", x]], e=y)
    d.update(zip("ab", [x + 3, y + 2]))
    dd = collections.defaultdict(list)
    dd.update([("p", x)])
    return d["a"] * d["c"] + dd["p"] + d["e"]


def test_dict_update_with_pairs_and_keywords(backend):
    one_graph(update_with_pairs, lambda: (torch.randn(3), torch.randn(3), {"a": 1}), backend)


# -- keys that are tensors or objects ----------------------------------------------------------


PARAM = torch.nn.Parameter(torch.ones(3))


class Token:
    """Hashed by identity (no ``__eq__``/``__hash__`` of its own)."""


def tensor_and_object_keys(x):
    token, other = Token(), Token()
    y = x + 1
    d = {"a": x, PARAM: 3, token: y}
    d[x] = x * 2
    scale = d[PARAM] * d[x] + d[token]
    found = (x in d, y in d, other in d, PARAM in d)
    popped = d.pop(token)
    keys = [k is x or k is PARAM for k in d]
    return scale + popped, found, keys, list(d.values())


def test_dict_keyed_by_tensors_and_objects(backend):
    one_graph(tensor_and_object_keys, tensors((3,)), backend)


# -- methods of a namedtuple subclass -------------------------------------------------------


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor

    def add(self):
        return self.first + self.second

    @staticmethod
    def one():
        return 1

    @classmethod
    def name(cls):
        return cls.__name__


def namedtuple_methods(a, b):
    pair = Pair(a, b)
    return pair.add() * pair.one(), pair.name(), pair


def test_namedtuple_subclass_methods(backend):
    one_graph(namedtuple_methods, tensors((3,), (3,)), backend)


def test_whether_torch_has_distributed_is_a_constant(backend):
    def fn(x):
        return x + 1 if torch.distributed.is_available() else x - 1

    one_graph(fn, tensors((3,)), backend)


# -- dicts passed in, keyed by objects --------------------------------------------------------


class Slot:
    """Hashed by identity, as a plain object is."""

    def __init__(self, name):
        self.name = name


class Point:
    """Hashed and compared by value, in Python."""

    def __init__(self, x):
        self.x = x

    def __hash__(self):
        return hash(self.x)

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x


SLOT_A, SLOT_B, SLOT_C = Slot("a"), Slot("bb"), Slot("ccc")


def read_and_update(d, x):
    out = x
    for key, value in d.items():
        out = out + value * len(key if isinstance(key, str) else key.name)
    d[SLOT_A] = d[SLOT_A] * 2
    del d[SLOT_B]
    d[SLOT_C] = out
    return out


def _fresh_slots():
    return {SLOT_A: torch.randn(3), SLOT_B: torch.randn(3), "bias": torch.randn(3)}


def test_dict_passed_in_keyed_by_objects_is_traced_and_updated():
    compiled = torchkiln.compile(read_and_update, backend="eager", fullgraph=True)
    for _ in range(3):
        d, x = _fresh_slots(), torch.randn(3)
        d_eager = {k: v.clone() for k, v in d.items()}
        torch.testing.assert_close(compiled(d, x), read_and_update(d_eager, x))
        assert list(d) == list(d_eager)  # the same key objects, in the same order
        for key in d:
            torch.testing.assert_close(d[key], d_eager[key])
    assert torchkiln.counters["frames"]["total"] == 1


def test_dict_keyed_by_other_objects_or_order_recompiles():
    def weighted(d, x):
        return sum(value * len(key.name) for key, value in d.items()) + x

    compiled = torchkiln.compile(weighted, backend="eager", fullgraph=True)
    x = torch.randn(3)
    for d in (
        {SLOT_A: torch.randn(3), SLOT_B: torch.randn(3)},
        {SLOT_B: torch.randn(3), SLOT_A: torch.randn(3)},  # another order
        {Slot("a"): torch.randn(3), SLOT_B: torch.randn(3)},  # another object, equal fields
        {SLOT_A: torch.randn(3), SLOT_C: torch.randn(3)},
    ):
        torch.testing.assert_close(compiled(d, x), weighted(d, x))
    assert torchkiln.counters["frames"]["total"] == 4


def test_dict_keyed_by_value_hashed_objects_finds_keys_made_in_the_frame():
    def lookup(d, x):
        return d[Point(1)] * x + d.get(Point(5), x)

    compiled = torchkiln.compile(lookup, backend="eager", fullgraph=True)
    for _ in range(2):
        d = {Point(1): torch.randn(3), Point(2): torch.randn(3)}
        x = torch.randn(3)
        torch.testing.assert_close(compiled(d, x), lookup(d, x))
