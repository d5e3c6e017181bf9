"""Spec (issue 17, Part 2 item 1): sets and frozensets traced in one graph, iterated in
CPython's own order (not insertion order), set arguments guarded and their changes replayed.

Each case runs with ``fullgraph=True`` on fresh random inputs and is compared with eager
(outputs, mutated arguments) by ``check_compiled``, which also counts graphs and breaks.
"""

import pytest
import torch

import torchkiln
from kiln_testing import assert_graph_count, check_compiled
from torchkiln.exc import Unsupported


def one_graph(fn, make_args, backend):
    return check_compiled(fn, make_args, backend=backend, graphs=1, fullgraph=True)


def x3():
    return (torch.randn(3),)


def literal_and_methods(x):
    s = {3, 1, 2}
    s.add(9)
    s.add(17)  # collides with 1 and 9: probes past them
    s.discard(1)
    s.remove(2)
    s.update([4], (25,))
    f = frozenset([2, 3, 4])
    derived = [
        s.union(f, [40]), s.intersection(f), s.difference(f), s.symmetric_difference(f),
        s.issubset(f), s.issuperset({3}), s.isdisjoint([7]), s.copy(), f | s, s | f,
    ]  # fmt: skip
    out = x
    for v in s:  # CPython's order: by hash slot, not insertion
        out = out * 0.5 + v
    return out, list(s), derived, 3 in s, 2 not in s, len(s)


def test_literal_methods_and_order(backend):
    one_graph(literal_and_methods, x3, backend)


def comprehension_and_operators(x):
    s = {i * 8 for i in range(6)}  # SET_ADD; 8k collide in a small table
    t = s | {1, 2}
    u = s & {0, 8, 99}
    s -= {0}
    s ^= {5, 8}
    s |= {33}
    s &= {5, 16, 24, 33, 40}
    cmp = [s <= t, s < s, s >= u, s > u, s == {5, 16, 24, 33, 40}, s != t, s == [5]]
    return x * len(t), list(t), list(u), list(s), cmp, s.pop(), list(s)


def test_comprehension_operators_in_place_and_pop(backend):
    one_graph(comprehension_and_operators, x3, backend)


def strings_and_frozensets(x):
    names = {"weight", "bias", "running_mean", "scale"}
    names.discard("bias")
    order = [n.upper() for n in names]  # string hashes: this process's order
    f = frozenset(n for n in names if n != "scale")
    return x * len(f), order, sorted(f), [n for n in frozenset(["q", "r", "s"])]


def test_strings_and_frozensets(backend):
    one_graph(strings_and_frozensets, x3, backend)


def from_iterables(x):
    d = {"b": 1, "a": 2, "c": 3}
    sets = [set(d), set(d.values()), set("hello"), set(range(10, 0, -3)), frozenset(d.items())]
    dims = {x.shape, x.shape, (3,)}  # shapes are tuples
    sizes = {x.shape[0], x.dim(), 3}
    return x * len(dims) + len(sizes), [list(s) for s in sets], x.shape in dims


def test_set_from_dicts_strings_ranges_and_shapes(backend):
    one_graph(from_iterables, x3, backend)


def tensors_by_identity(x, y):
    s = {x, y}
    s.add(x)  # already there: the same tensor
    z = x + 1
    members = [x in s, z in s, y in s]
    s.discard(y)
    (only,) = s  # one element: its order is known
    return only * len(s), members, len({x, z, y, x})


def test_set_of_tensors_hashes_by_identity(backend):
    one_graph(tensors_by_identity, lambda: (torch.randn(3), torch.randn(3)), backend)


def classes_and_functions(x):
    act = {torch.relu, torch.sigmoid}
    layers = {torch.nn.Linear, torch.nn.ReLU}
    return x * (torch.nn.Linear in layers) + (torch.tanh in act), act | {torch.tanh}


def test_set_of_classes_and_functions(backend):
    one_graph(classes_and_functions, x3, backend)


def dict_views(x):
    d = {"a": x, "b": x * 2, "c": 3}
    common = d.keys() & {"a", "c", "z"}
    rest = d.keys() - ["a"]
    both = d.keys() | {"q"}
    pairs = {"k": 1, "j": 2}.items() ^ {("k", 1), ("z", 0)}
    equal = d.keys() == {"a", "b", "c"}
    with_tensors = d.items() - {("c", 3)}  # values hash by identity
    found = [("a", x) in with_tensors, ("c", 3) in with_tensors, len(with_tensors)]
    return x * len(common), list(rest), list(both), pairs, equal, found


def test_dict_views_set_operations(backend):
    one_graph(dict_views, x3, backend)


def argument_mutated(s, x):
    s.add(5)
    s.discard(1)
    s |= {7, 9}
    s -= {2}
    s.update([11], {"k": 0}.keys())
    s.difference_update([3])
    s.symmetric_difference_update({5, 6})
    return x + len(s), 5 in s


def test_set_argument_is_mutated_after_the_call_like_eager(backend):
    make = lambda: ({1, 2, 3}, torch.randn(3))  # noqa: E731
    check_compiled(argument_mutated, make, backend=backend, graphs=1, fullgraph=True)


def refill(s, x):
    s.add(8)
    return x * len(s)


def test_set_argument_keeps_eager_order_after_the_call(backend):
    def shrunk():  # a large table holding a few elements
        s = set(range(40))
        for i in [*range(30), *range(34, 40)]:
            s.discard(i)
        return s

    compiled = torchkiln.compile(refill, backend=backend, fullgraph=True)
    eager, mine = shrunk(), shrunk()
    torch.testing.assert_close(compiled(mine, torch.ones(3)), refill(eager, torch.ones(3)))
    assert list(mine) == list(eager)


def argument_read(s, x):
    for v in s:  # the argument's own order, guarded
        x = x * 0.5 + v
    return x, sorted(s), max(s), len(s), list(s)


def test_set_argument_guarded_new_contents_recompile(backend):
    compiled = one_graph(argument_read, lambda: ({1, 2, 3}, torch.randn(3)), backend)
    for s in ({1, 2, 4}, {1, 2, 3, 4}, {9, 1}, {1, 9}, {True, 2, 3}):
        x = torch.randn(3)
        expected = argument_read(set(s), x)
        actual = compiled(set(s), x)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1:] == expected[1:]
    assert_graph_count(backend, 6, "after five set arguments that differ")  # {1, 9} != {9, 1} order


def read_global(x):
    return x * len(FLAGS), [str(v) for v in FLAGS]


def test_global_set_guarded_by_contents_types_and_order(backend):
    global FLAGS
    compiled = torchkiln.compile(read_global, backend=backend, fullgraph=True)
    for value in ({1, 2, 3}, {True, 2, 3}, {1, 2}, {1, 9}, {9, 1}):  # {True, 2, 3} == {1, 2, 3}
        FLAGS = value
        x = torch.randn(3)
        actual, expected = compiled(x), read_global(x)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1] == expected[1]
    assert_graph_count(backend, 5, "after five different global sets")


FLAGS: set = set()


def returned(x):
    s = {1, 2}
    s.add(x.shape[0])
    (only,) = frozenset([x, x])
    return s, only * 2, frozenset({4, 5})


def test_sets_returned(backend):
    one_graph(returned, x3, backend)


def errors_caught(x):
    s = {1}
    try:
        s.remove(7)
    except KeyError:
        x = x + 1
    try:
        {[1]}  # noqa: B018
    except TypeError:
        x = x * 2
    try:
        set().pop()
    except KeyError:
        x = x - 1
    return x


def test_python_errors_raised_and_caught(backend):
    one_graph(errors_caught, x3, backend)


def iterate_tensor_set(x, y):
    return [t * 2 for t in {x, y}]


def test_iterating_a_set_of_tensors_breaks_with_a_reason(backend):
    with pytest.raises(Unsupported, match="iteration order of a set of tensors"):
        torchkiln.compile(iterate_tensor_set, backend=backend, fullgraph=True)(
            torch.randn(3), torch.randn(3)
        )


def changed_argument_iterated(s, x):
    s.add(8)
    x = x + 1
    out = []
    for v in s:  # breaks here; the rest runs in a resume function
        out.append(x * v)
    return out


def test_iterating_a_changed_set_argument_breaks_and_matches_eager(backend):
    make = lambda: ({1, 2, 3}, torch.randn(3))  # noqa: E731
    check_compiled(changed_argument_iterated, make, backend=backend, graphs=(1, 2), breaks=1)
