"""Spec (issue 17, Part 2 item 2): the ``collections`` containers, dict views as sets,
namedtuple classes made in the frame, and dataclasses, traced in one graph.

Each case runs with ``fullgraph=True`` on fresh random inputs and is compared with eager
(outputs, mutated arguments) by ``check_compiled``, which also counts graphs and breaks.
"""

import collections
import dataclasses
import functools

import pytest
import torch

import torchkiln
from kiln_testing import check_compiled


def tensors(*shapes):
    return lambda: tuple(torch.randn(*s) for s in shapes)


def one_graph(fn, make_args, backend):
    return check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


# -- OrderedDict -------------------------------------------------------------------------


def ordered_dict_ops(x):
    d = collections.OrderedDict(a=x, b=x + 1)
    d["c"] = x * 2
    d.move_to_end("a")
    d.move_to_end("c", last=False)
    key, value = d.popitem()  # "a", the last
    first = d.popitem(last=False)  # "c"
    return d, key, value * 3, first[1]


def test_ordered_dict_move_to_end_popitem(backend):
    one_graph(ordered_dict_ops, tensors((3,)), backend)


def ordered_dict_argument(d, x):
    d.move_to_end("p", last=False)
    d["q"] = d["q"] + x
    return d["p"] * x


def test_ordered_dict_argument_mutated(backend):
    make = lambda: (collections.OrderedDict(q=torch.randn(3), p=torch.randn(3)), torch.randn(3))  # noqa: E731
    one_graph(ordered_dict_argument, make, backend)


def ordered_dict_equality(x):
    a = collections.OrderedDict(u=1, v=2)
    b = collections.OrderedDict(v=2, u=1)
    return x * (a == b) + (dict(a) == dict(b))


def test_ordered_dict_equality_is_ordered(backend):
    one_graph(ordered_dict_equality, tensors((3,)), backend)


# -- defaultdict ---------------------------------------------------------------------------


def defaultdict_groups(x):
    groups = collections.defaultdict(list)
    for i, row in enumerate(x):
        groups[i % 2].append(row)
    counts = collections.defaultdict(int)
    for i in range(5):
        counts[i % 3] += 1
    made = collections.defaultdict(lambda: x.sum())
    return torch.stack(groups[0]) + torch.stack(groups[1]), dict(counts), made["new"], groups


def test_defaultdict_factories(backend):
    one_graph(defaultdict_groups, tensors((4, 3)), backend)


def defaultdict_argument(d, x):
    d["seen"].append(x.sin())
    return d.default_factory is list


def test_defaultdict_argument_mutated(backend):
    make = lambda: (collections.defaultdict(list, old=[torch.randn(2)]), torch.randn(2))  # noqa: E731
    one_graph(defaultdict_argument, make, backend)


# -- deque -----------------------------------------------------------------------------------


def deque_window(x):
    window = collections.deque(maxlen=3)
    for i in range(5):
        window.append(x * i)
    window.appendleft(x - 1)  # drops the rightmost
    window.rotate(1)
    last = window.pop()
    first = window.popleft()
    return torch.stack(list(window)) + last + first, len(window), window


def test_deque_maxlen_rotate(backend):
    one_graph(deque_window, tensors((2,)), backend)


def deque_argument(q, x):
    q.extend([x, x + 1])
    head = q.popleft()
    return head * 2, q[0] - x, q.maxlen


def test_deque_argument_mutated(backend):
    make = lambda: (collections.deque([torch.randn(2)], maxlen=2), torch.randn(2))  # noqa: E731
    one_graph(deque_argument, make, backend)


# -- Counter -----------------------------------------------------------------------------------


def counter_ops(x):
    c = collections.Counter("abracadabra")
    c.update(["a", "z"])
    c2 = collections.Counter(a=1, b=5)
    both = c + c2
    c -= c2
    top = c.most_common(2)
    return x * both["a"] + c["missing"], top, both, c


def test_counter_counting_and_arithmetic(backend):
    one_graph(counter_ops, tensors((3,)), backend)


# -- dict views ----------------------------------------------------------------------------------


def view_set_ops(x):
    d = {"a": 1, "b": 2, "c": 3}
    e = {"b": 2, "c": 30, "d": 4}
    common = d.keys() & e.keys()
    either = d.keys() | {"z"}
    only = d.items() - e.items()
    same = d.keys() == {"a", "b", "c"}
    left = {"a", "q"} & d.keys()
    return x * len(common), sorted(either), sorted(only), same, left


def test_dict_view_set_operations(backend):
    one_graph(view_set_ops, tensors((3,)), backend)


# -- namedtuple made in the frame -------------------------------------------------------------------


def namedtuple_made_here(x):
    Pair = collections.namedtuple("Pair", ["first", "second"], defaults=[None])
    p = Pair(x.sin())
    q = p._replace(second=x.cos())
    return q.first + q.second, q._fields, p.second is None, tuple(q)


def test_namedtuple_class_made_in_frame(backend):
    one_graph(namedtuple_made_here, tensors((3,)), backend)


# -- dataclasses -----------------------------------------------------------------------------------


@dataclasses.dataclass
class Batch:
    inputs: torch.Tensor
    scale: float = 2.0
    tags: list = dataclasses.field(default_factory=list)
    total: torch.Tensor = dataclasses.field(init=False, default=None)

    def __post_init__(self):
        self.total = self.inputs.sum() * self.scale


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    b: int = 3


def dataclass_ops(x):
    batch = Batch(x, scale=3.0)
    batch.tags.append("seen")
    names = [f.name for f in dataclasses.fields(batch)]
    other = dataclasses.replace(batch, scale=0.5)
    frozen = Frozen(x.cos())
    again = dataclasses.replace(frozen, b=4)
    flag = dataclasses.is_dataclass(batch)
    return batch, other.total, names, frozen, again.a * again.b, flag


def test_dataclass_construct_fields_replace_frozen(backend):
    one_graph(dataclass_ops, tensors((3,)), backend)


class RenamingMeta(type):
    """Wraps the ``__init__`` that ``@dataclass`` sets on the class to accept an old keyword,
    as transformers' ``ModelOutput`` classes do since 5.2x (``_BCCacheNameMeta``)."""

    def __setattr__(cls, name, value):
        if name == "__init__":
            generated = value

            @functools.wraps(generated)
            def __init__(self, *args, **kwargs):
                if "old_scale" in kwargs:
                    kwargs["scale"] = kwargs.pop("old_scale")
                generated(self, *args, **kwargs)

            value = __init__
        super().__setattr__(name, value)


@dataclasses.dataclass
class Renamed(collections.OrderedDict, metaclass=RenamingMeta):
    """A dataclass that is an ``OrderedDict``, like ``ModelOutput``."""

    inputs: torch.Tensor
    scale: float = 1.0


class CountingMeta(type):
    """A metaclass that builds instances its own way: not traced, the graph breaks."""

    def __call__(cls, *args, **kwargs):
        return super().__call__(*args, **kwargs)


@dataclasses.dataclass
class Counted(collections.OrderedDict, metaclass=CountingMeta):
    inputs: torch.Tensor


def metaclass_dataclass_built_here(x):
    a, b = Renamed(x, old_scale=3.0), Renamed(x.cos())
    return a.inputs * a.scale + b.inputs * b.scale, a


def test_dataclass_of_a_metaclass_that_wraps_its_init(backend):
    one_graph(metaclass_dataclass_built_here, tensors((3,)), backend)


def test_dataclass_of_a_metaclass_with_its_own_call_breaks():
    def fn(x):
        return Counted(x + 1).inputs * 2

    with pytest.raises(torchkiln.exc.Unsupported, match="constructing a Counted object"):
        torchkiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    torch.testing.assert_close(torchkiln.compile(fn, backend="eager")(x := torch.randn(3)), fn(x))


def frozen_assignment(x):
    f = Frozen(x)
    f.a = x + 1  # FrozenInstanceError: the graph breaks here, eager raises
    return f


def test_frozen_dataclass_assignment_breaks_cleanly(backend):
    compiled = torchkiln.compile(frozen_assignment, backend=backend)
    with pytest.raises(dataclasses.FrozenInstanceError):
        compiled(torch.randn(2))


class Registry(collections.OrderedDict):
    """A user dict subclass built in the frame, with its own ``__init__`` and ``__getitem__``."""

    def __init__(self, scale, **items):
        super().__init__(**items)
        self.scale = scale

    def __getitem__(self, key):
        return super().__getitem__(key) * self.scale


def dict_subclass_built_here(x):
    r = Registry(3, a=x, b=x.sin())
    r["c"] = x.cos()
    return r["a"] + r["c"], list(r.keys()), len(r), r


def test_user_dict_subclass_built_in_frame(backend):
    one_graph(dict_subclass_built_here, tensors((3,)), backend)
