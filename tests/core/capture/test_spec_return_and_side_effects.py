"""Spec (issue 3): any return structure is rebuilt; side effects on Python objects are replayed.

Returns keep their exact structure and types (nested tuples, lists, dicts in
key order, None, Python scalars, namedtuples). Mutations of Python objects
(list append, dict updates, setattr, globals, closure cells) happen as in
eager, in program order, with the graph still one graph.
"""

import collections

import torch

import torchkiln
from kiln_testing import assert_graph_count, assert_same, check_compiled

Pair = collections.namedtuple("Pair", ["first", "second"])

STATE = {"calls": 0}
LAST_RESULT = None
LAST_ROWS = None


class Box:
    def __init__(self):
        self.value = None
        self.history = []


def test_return_nested_tuples_and_lists(backend):
    def fn(x):
        return (x.sin(), [x.cos(), (x + 1, [x * 2])]), [x - 1]

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_return_dict_keeps_key_order(backend):
    def fn(x):
        return {"z": x * 2, "a": x + 1, "m": {"inner": x.sum()}}

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_return_none_with_a_tensor_op_for_its_side_effect(backend):
    def fn(x, out):
        out.copy_(x.exp())

    check_compiled(fn, lambda: (torch.randn(3), torch.zeros(3)), backend=backend, graphs=1)


def test_return_tuple_containing_none(backend):
    def fn(x):
        return None, x * 2, None

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_return_python_scalars_computed_from_metadata(backend):
    def fn(x):
        return x * 2, x.shape[0] * 1.5, x.dim(), str(x.dtype), x.shape

    check_compiled(fn, lambda: (torch.randn(4, 2),), backend=backend, graphs=1)


def test_return_namedtuple(backend):
    def fn(x):
        return Pair(x.sin(), second=Pair(x.cos(), None))

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_return_torch_return_type_of_max(backend):
    def fn(x):
        return x.max(dim=0)

    check_compiled(fn, lambda: (torch.randn(4, 3),), backend=backend, graphs=1)


def test_return_an_input_unchanged_keeps_identity(backend):
    compiled = torchkiln.compile(lambda x, y: (x, x * y), backend=backend)
    x, y = torch.randn(3), torch.randn(3)
    out, prod = compiled(x, y)
    assert out is x, "returning an input must return the same tensor object"
    torch.testing.assert_close(prod, x * y)
    assert_graph_count(backend, 1)


def test_same_tensor_returned_twice_is_one_object(backend):
    compiled = torchkiln.compile(lambda x: (lambda y: (y, y))(x.sin()), backend=backend)
    a, b = compiled(torch.randn(3))
    assert a is b, "a tensor returned twice must be the same object twice, as in eager"
    assert_graph_count(backend, 1)


def test_append_to_a_list_argument(backend):
    def fn(x, log):
        log.append(x.sum())
        y = x * 2
        log.append(y.mean())
        return y

    check_compiled(fn, lambda: (torch.randn(3), [torch.ones(1)]), backend=backend, graphs=1)


def test_list_mutations_happen_in_program_order(backend):
    def fn(x, log):
        log.append("start")
        log.insert(0, x.shape[0])
        log.extend([x * 2, "end"])
        del log[1]
        log.append(len(log))
        return x + 1

    check_compiled(fn, lambda: (torch.randn(3), ["keep"]), backend=backend, graphs=1)


def test_list_pop_and_reverse_on_an_argument(backend):
    def fn(xs):
        last = xs.pop()
        xs.reverse()
        return last * 2

    check_compiled(fn, lambda: ([torch.randn(2) for _ in range(3)],), backend=backend, graphs=1)


def test_dict_argument_mutation(backend):
    def fn(x, d):
        d["out"] = x * 2
        d.update(count=d.get("count", 0) + 1)
        d.pop("drop")
        d.setdefault("seen", x.shape[0])
        return d["out"] + 1

    check_compiled(fn, lambda: (torch.randn(3), {"drop": 1, "count": 4}), backend=backend, graphs=1)


def test_setattr_on_a_plain_object(backend):
    def fn(x, box):
        box.value = x.cos()
        box.history.append(x.shape[0])
        box.new_attr = "set"
        return x.sin()

    check_compiled(fn, lambda: (torch.randn(3), Box()), backend=backend, graphs=1)


def test_list_mutated_and_also_returned(backend):
    def fn(x, acc):
        acc.append(x * 2)
        return acc

    compiled = check_compiled(
        fn, lambda: (torch.randn(3), [torch.zeros(3)]), backend=backend, graphs=1
    )
    acc = [torch.zeros(3)]
    assert compiled(torch.randn(3), acc) is acc, "the returned list must be the argument itself"


def test_new_list_built_and_returned_with_a_python_int(backend):
    def fn(x):
        out = []
        for i in range(3):
            out.append(x * i)
        out.append(len(out))
        return out

    check_compiled(fn, lambda: (torch.randn(2),), backend=backend, graphs=1)


def test_assignment_to_a_global_tensor(backend):
    global LAST_RESULT

    def fn(x):
        global LAST_RESULT
        y = x.relu()
        LAST_RESULT = y * 2
        return y

    compiled = torchkiln.compile(fn, backend=backend)
    for _ in range(2):
        x = torch.randn(4)
        LAST_RESULT = None
        expected = fn(x)
        expected_global = LAST_RESULT
        LAST_RESULT = None
        assert_same(compiled(x), expected)
        assert_same(LAST_RESULT, expected_global)
    assert_graph_count(backend, 1)


def test_assignment_to_a_global_python_value(backend):
    global LAST_ROWS

    def fn(x):
        global LAST_ROWS
        LAST_ROWS = x.shape[0]
        return x + 1

    compiled = torchkiln.compile(fn, backend=backend)
    for _ in range(2):
        x = torch.randn(3)
        LAST_ROWS = None
        expected = fn(x)
        LAST_ROWS = None
        assert_same(compiled(x), expected)
        assert LAST_ROWS == 3, f"global LAST_ROWS is {LAST_ROWS}, expected 3"
    assert_graph_count(backend, 1)


def test_mutation_of_a_global_dict(backend):
    def fn(x):
        STATE["last"] = x * 3
        STATE["rows"] = x.shape[0]
        return x - 1

    compiled = torchkiln.compile(fn, backend=backend)
    for _ in range(2):
        x = torch.randn(2)
        STATE.clear()
        expected = fn(x)
        eager_state = dict(STATE)
        STATE.clear()
        assert_same(compiled(x), expected)
        assert_same(dict(STATE), eager_state)
    assert_graph_count(backend, 1)


def test_closure_cell_assigned_by_the_compiled_function(backend):
    seen = []
    last = None

    def fn(x):
        nonlocal last
        last = x.sum()
        seen.append(x.shape[0])
        return x * 2

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), x * 2)
    torch.testing.assert_close(last, x.sum())
    assert seen == [5], f"closure list is {seen}"
    assert_graph_count(backend, 1)


def test_side_effect_on_an_object_that_is_also_read(backend):
    def fn(x, box):
        box.history.append(x.mean())
        box.history.append(box.history[-1] * 2)
        return x + box.history[-1]

    check_compiled(fn, lambda: (torch.randn(3), Box()), backend=backend, graphs=1)


def test_inplace_mutation_of_a_tensor_in_a_list_argument(backend):
    def fn(ts):
        ts[0].mul_(2)
        ts[1] = ts[1] + 1
        return ts[0].sum()

    check_compiled(fn, lambda: ([torch.randn(3), torch.randn(3)],), backend=backend, graphs=1)


def test_side_effect_made_by_an_inlined_helper(backend):
    def record(log, value):
        log.append(value)
        return value

    def fn(x, log):
        a = record(log, x.sin())
        b = record(log, a.cos())
        return a + b

    check_compiled(fn, lambda: (torch.randn(3), []), backend=backend, graphs=1)
