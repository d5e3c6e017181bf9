"""Spec (issue 17, items 1, 2 and 6): user subclasses of list, tuple, dict, set and frozenset,
``collections.ChainMap``, and user objects with ``__hash__``/``__eq__`` as dict keys and set
members, each traced in one graph (as torch.compile traces them) and compared with eager:
results of the user's class with its items and attributes, and arguments changed as eager
changes them."""

import collections
import copy
import dataclasses

import torch
from torch.testing import assert_close

import torchkiln
from kiln_testing import assert_graph_count, assert_same

NATIVE = (list, tuple, dict, set, frozenset, collections.ChainMap)


def assert_deep(actual, expected):
    """``assert_same`` that also compares the attributes of instances of subclasses of the
    native containers (``assert_same`` compares only their items), and a ``ChainMap`` by its
    maps."""
    assert type(actual) is type(expected), f"{type(actual)} != {type(expected)}"
    if isinstance(expected, NATIVE) and hasattr(expected, "__dict__"):
        assert_deep(vars(actual), vars(expected))
    if isinstance(expected, collections.ChainMap):
        assert_deep(actual.maps, expected.maps)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            assert_deep(actual[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_deep(a, e)
    else:
        assert_same(actual, expected)


def one_graph(fn, backend, make_args, calls=2):
    """Compiled with ``fullgraph=True`` on ``calls`` fresh argument sets: one graph, the same
    results and argument changes as eager."""
    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    for _ in range(calls):
        args = make_args()
        eager_args, compiled_args = copy.deepcopy(args), copy.deepcopy(args)
        expected = fn(*eager_args)
        assert_deep(compiled(*compiled_args), expected)
        assert_deep(list(compiled_args), list(eager_args))
    assert_graph_count(backend, 1)
    return compiled


# -- list -------------------------------------------------------------------------------


class Stack(list):
    def push(self, value):
        self.append(value)
        self.pushes = getattr(self, "pushes", 0) + 1

    def total(self):
        return sum(self)


class Doubled(list):
    """Overrides ``__getitem__`` and ``__len__``: iteration still reads the items natively."""

    def __getitem__(self, i):
        return super().__getitem__(i) * 2

    def __len__(self):
        return super().__len__() + 100


def test_list_subclass_built_in_the_frame_and_returned(backend):
    def fn(x):
        s = Stack([x, x + 1])
        s.push(x * 3)
        s.extend([x - 1])
        s.tag = "made"
        s[0] = s[0] * 2
        del s[1]
        ints = Stack([3, 1, 2])
        ints.sort()
        summary = (len(s), ints.index(2), 2 in ints, isinstance(s, list), isinstance(s, Stack))
        joined = s + [x]  # noqa: RUF005 -- list.__add__ of the subclass, under test
        return s.total() * s.pushes, summary, [v + 1 for v in s], joined, s, ints

    one_graph(fn, backend, lambda: (torch.randn(3),))


def test_list_subclass_argument_changed_in_place(backend):
    def fn(x, s):
        s.push(3.0)
        s += [2.0]
        s.label = "seen"
        s.insert(0, 1.0)
        return x * s.total(), s.pushes, 2.0 in s, s == [1.0, 0.5, 3.0, 2.0], s != [1.0]

    one_graph(fn, backend, lambda: (torch.randn(3), Stack([0.5])))


def test_list_subclass_overriding_getitem_and_len(backend):
    def fn(x, d):
        made = Doubled([x, 3])
        return x * d[1] + made[0] + made[1], len(d), len(made), list(d), [v for v in made]

    one_graph(fn, backend, lambda: (torch.randn(3), Doubled([1.0, 2.0])))


# -- tuple ------------------------------------------------------------------------------


class Pair(tuple):
    def __new__(cls, a, b):
        return super().__new__(cls, (a, b))

    def total(self):
        return self[0] + self[1]


class Row(tuple):
    def first(self):
        return self[0]


def test_tuple_subclasses_built_passed_in_and_returned(backend):
    def fn(x, row):
        p = Pair(x, x * 2)
        r = Row([x, 1.0])
        r.note = "n"
        head, tail = p
        joined = p + (1,)  # noqa: RUF005 -- tuple.__add__ of the subclass, under test
        return p.total() * row.first(), head - tail, joined, len(row), row[1:], p, r

    one_graph(fn, backend, lambda: (torch.randn(3), Row((2.0, 3.0))))


# -- dict -------------------------------------------------------------------------------


class Counts(dict):
    def __missing__(self, key):
        return len(key)

    def bump(self, key):
        self[key] = self[key] + 1


def test_dict_subclass_with_missing_built_and_returned(backend):
    def fn(x):
        d = Counts(a=x)
        d.bump("abc")
        d.update({"b": 2})
        d.seen = True
        keys, values = list(d.keys()), list(d.values())
        return x * d["four"] + d["a"], keys, values, dict(d), "abc" in d, d.get("zz", 0), d

    one_graph(fn, backend, lambda: (torch.randn(3),))


def test_dict_subclass_argument_changed_in_place(backend):
    def fn(x, d):
        d.bump("new")
        d["a"] = d["a"] * 2
        del d["b"]
        d.touched = 1
        return x * d["missing"] + d["a"], list(d.items()), len(d)

    one_graph(fn, backend, lambda: (torch.randn(3), Counts(a=torch.randn(3), b=1)))


# -- set and frozenset -----------------------------------------------------------------


class Bag(set):
    def size(self):
        return len(self)


class Tags(frozenset):
    def has(self, key):
        return key in self


def test_set_subclass_argument_and_result(backend):
    def fn(x, b):
        b.add("z")
        b.discard("a")
        b |= {"q"}
        made = Bag(["k"])
        made.add("j")
        made.owner = "frame"
        return x * b.size(), b & {"z", "y"}, "q" in b, made.size(), isinstance(b, set), made

    one_graph(fn, backend, lambda: (torch.randn(3), Bag(["a", "b"])))


def test_frozenset_subclass_argument_and_result(backend):
    def fn(x, t):
        u = Tags(["a", "b"])
        return x * len(u | t), u.has("a"), t.has("c"), "d" in t, u

    one_graph(fn, backend, lambda: (torch.randn(3), Tags(["c"])))


# -- collections.ChainMap --------------------------------------------------------------


def test_chainmap_built_in_the_frame(backend):
    def fn(x):
        first, second = {"a": 1}, {"a": 2, "b": 3}
        c = collections.ChainMap(first, second)
        c["z"] = 4
        child = c.new_child({"w": 5})
        child["a"] = 10
        looked = (c["a"], c["b"], child["a"], child.parents["a"], c.get("nope", -1))
        shape = ("b" in c, "w" in c, len(c), list(c), len(child.maps), child.maps[1] is first)
        try:
            del c["b"]  # in the second map only
        except KeyError as e:
            message = e.args[0]
        return x * sum(looked), shape, message, first, dict(child), child

    one_graph(fn, backend, lambda: (torch.randn(3),))


def test_chainmap_argument_writes_go_to_its_first_map(backend):
    def fn(x, c):
        c["new"] = x
        del c["gone"]
        return x * c["a"] + c["b"] + c["new"], len(c), sorted(c), c.parents.maps

    def args():
        return torch.randn(3), collections.ChainMap({"a": 1.0, "gone": 0}, {"a": 5.0, "b": 2.0})

    one_graph(fn, backend, args)


# -- user objects as keys and set members -----------------------------------------------


class Key:
    def __init__(self, n):
        self.n = n

    def __hash__(self):
        return hash(self.n)

    def __eq__(self, other):
        return isinstance(other, Key) and self.n == other.n


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int


def test_user_hash_and_eq_keys_made_in_the_frame(backend):
    def fn(x):
        d = {Key(1): x, Key(2): x + 1, Point(0, 1): x * 3}
        s = {Key(1), Key(1), Key(3)}
        d[Key(1)] = d[Key(1)] * 2
        return d[Key(2)] + d[Key(1)] + d[Point(0, 1)], len(s), Key(3) in s, Key(4) in s, len(d)

    one_graph(fn, backend, lambda: (torch.randn(3),))


def test_user_key_passed_in_is_looked_up_by_its_value(backend):
    def fn(x, k):
        d = {Key(1): x, Key(2): x + 1}
        return d[k] * 2, k in {Key(2)}

    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    for n in (1, 2, 1):  # another key object, another hash: never the answer of the first
        assert_same(compiled(x, Key(n)), fn(x, Key(n)))
    assert_graph_count(backend, 2)


def test_compiled_results_of_user_containers_are_usable_after_the_call(backend):
    def fn(x):
        return Stack([x]), Pair(x, 1), Counts(a=1), collections.ChainMap({"k": x})

    s, p, c, chain = torchkiln.compile(fn, backend=backend, fullgraph=True)(torch.ones(2))
    s.push(2.0)
    assert s.pushes == 1 and s.total().tolist() == [3.0, 3.0]
    assert p.total().tolist() == [2.0, 2.0] and c["xyz"] == 3
    assert_close(chain["k"], torch.ones(2))


def reads_everything(x, s, c, k):
    return x * s.total() + c["a"] + {Key(1): 1.0, Key(2): 2.0}[k]


def test_stored_captures_are_reloaded_only_where_their_guards_hold(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torchkiln.config, "persist_captures", True)
    x = torch.randn(3)

    def run(*args):
        compiled = torchkiln.compile(reads_everything, backend="eager", fullgraph=True)
        assert_close(compiled(x, *args), reads_everything(x, *args))
        return dict(torchkiln.counters["capture_cache"])

    assert run(Stack([1.0]), collections.ChainMap({"a": 1.0}), Key(1))["stores"] == 1
    torchkiln.reset()  # as a new process: the record is loaded where its guards pass
    assert run(Stack([1.0]), collections.ChainMap({"a": 1.0}), Key(1))["hits"] == 1
    for changed in (
        (Stack([5.0]), collections.ChainMap({"a": 1.0}), Key(1)),
        (Stack([1.0]), collections.ChainMap({"a": 2.0}), Key(1)),
        (Stack([1.0]), collections.ChainMap({"a": 1.0}), Key(2)),
    ):
        torchkiln.reset()
        assert run(*changed).get("hits", 0) == 0
