"""Mutable inputs that may be one object: an entry captured while two sources gave distinct
objects is not reused when they give one (and the reverse), where the frame mutates one of
them. Each sequence of calls is checked against eager with the same aliasing, call by call."""

import copy

import pytest
import torch
from torch.testing import assert_close

import torchkiln
from torchkiln import config
from torchkiln.capture import frame_capture
from torchkiln.capture.dispatch import _caches

BACKENDS = ["eager", "aot_eager"]

#: Orders of calls: a frame captured with either aliasing, then called with the other.
SEQUENCES = [
    ("distinct", "same", "distinct", "same"),
    ("same", "distinct", "same", "distinct"),
    ("distinct", "distinct", "same", "same"),
]


def aliased(pattern, make):
    if pattern == "same":
        obj = make()
        return obj, obj
    return make(), make()


def state(args):
    """What the call left in its arguments, and whether they are one object."""
    contents = [copy.deepcopy(vars(a) if hasattr(a, "__dict__") else a) for a in args]
    return contents, args[0] is args[1]


def frames():
    return torchkiln.counters["frames"]["total"]


def check_sequence(fn, make, sequence, backend):
    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.ones(2)
    for pattern in sequence:
        eager_args = aliased(pattern, make)
        compiled_args = aliased(pattern, make)
        expected = fn(x, *eager_args)
        got = compiled(x, *compiled_args)
        assert_close(got, expected, msg=f"{fn.__name__}, {pattern} in {sequence}")
        assert state(compiled_args) == state(eager_args)
    # one capture per aliasing pattern: a recompile, never a stale entry, and no more
    assert frames() == len(set(sequence))


def append_then_len(x, a, b):
    a.append(1)
    return x * len(b)


def setitem_then_len(x, a, b):
    a["k"] = 1
    return x * len(b)


def add_then_len(x, a, b):
    a.add(1)
    return x * len(b)


def append_through_both(x, a, b):
    a.append(1)
    b.append(2)
    return x + 1


class Box:
    def __init__(self):
        self.v = 1.0


def setattr_then_read(x, a, b):
    a.v = 2.0
    return x * b.v


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.factor = 1.0


def module_setattr_then_read(x, a, b):
    a.factor = 3.0
    return x * b.factor


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sequence", SEQUENCES, ids="-".join)
@pytest.mark.parametrize(
    "fn, make",
    [
        (append_then_len, list),
        (setitem_then_len, dict),
        (add_then_len, set),
        (append_through_both, list),
        (setattr_then_read, Box),
        (module_setattr_then_read, Scale),
    ],
    ids=["list", "dict", "set", "list-two-writes", "user-object", "module"],
)
def test_aliasing_of_mutated_arguments_matches_eager(fn, make, sequence, backend):
    check_sequence(fn, make, sequence, backend)


def test_the_reproducer_recompiles_instead_of_a_stale_answer():
    compiled = torchkiln.compile(append_then_len, backend="eager")
    x = torch.ones(2)
    assert_close(compiled(x, [], []), torch.zeros(2))
    shared = []
    assert_close(compiled(x, shared, shared), torch.ones(2))
    assert shared == [1]
    assert torchkiln.counters["recompiles"]["total"] == 1


def append_read_then_break(x, a, b):
    a.append(1)
    n = len(b)
    print("graph break")
    return x * n


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sequence", SEQUENCES, ids="-".join)
def test_a_frame_that_breaks_after_the_mutation(sequence, backend, capsys):
    """The compiled prefix of a breaking frame is guarded as a whole frame is."""
    compiled = torchkiln.compile(append_read_then_break, backend=backend)
    x = torch.ones(2)
    for pattern in sequence:
        eager_args = aliased(pattern, list)
        compiled_args = aliased(pattern, list)
        expected = append_read_then_break(x, *eager_args)
        assert_close(compiled(x, *compiled_args), expected, msg=pattern)
        assert state(compiled_args) == state(eager_args)
    assert torchkiln.counters["recompiles"]["total"] >= 1


def append_then_len3(x, a, b, c):
    a.append(1)
    return x * len(c) + len(b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_three_sources_of_one_type(backend):
    """More than two objects of a mutated type: one check that all are distinct."""
    compiled = torchkiln.compile(append_then_len3, backend=backend)
    x = torch.ones(2)
    shapes = [(0, 1, 2), (0, 1, 0), (0, 0, 1), (0, 1, 2), (0, 0, 0), (0, 1, 0)]
    for shape in shapes:
        for run in (append_then_len3, compiled):
            objs = [[] for _ in range(3)]
            args = [objs[i] for i in shape]
            result = run(x, *args)
            if run is append_then_len3:
                expected, expected_args = result, copy.deepcopy(args)
            else:
                assert_close(result, expected, msg=str(shape))
                assert args == expected_args
    assert frames() == len(set(shapes))


SHARED = []


def append_then_len_of_global(x, a):
    a.append(1)
    return x * len(SHARED)


def make_closure_reader():
    cell = []

    def append_then_len_of_cell(x, a):
        a.append(1)
        return x * len(cell)

    return append_then_len_of_cell, cell


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first", ["distinct", "same"])
def test_an_argument_that_is_a_global(first, backend):
    compiled = torchkiln.compile(append_then_len_of_global, backend=backend)
    x = torch.ones(2)
    order = [first, "same" if first == "distinct" else "distinct"] * 2
    for pattern in order:
        results = []
        for run in (append_then_len_of_global, compiled):
            SHARED.clear()
            results.append((run(x, SHARED if pattern == "same" else []), list(SHARED)))
        (expected, expected_shared), (got, got_shared) = results
        assert_close(got, expected, msg=pattern)
        assert got_shared == expected_shared
    assert frames() == 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first", ["distinct", "same"])
def test_an_argument_that_is_a_closure_cell(first, backend):
    fn, cell = make_closure_reader()
    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.ones(2)
    order = [first, "same" if first == "distinct" else "distinct"] * 2
    for pattern in order:
        results = []
        for run in (fn, compiled):
            cell.clear()
            results.append((run(x, cell if pattern == "same" else []), list(cell)))
        (expected, expected_cell), (got, got_cell) = results
        assert_close(got, expected, msg=pattern)
        assert got_cell == expected_cell
    assert frames() == 2


# -- cost: only frames that mutate pay ------------------------------------------------------


def read_only(x, a, b):
    return x * len(a) + len(b)


def mutate_a_dict_read_lists(x, d, a, b):
    d["k"] = 1
    return x * len(a) + len(b)


def guard_count(fn, make_args, monkeypatch, distinct_guards):
    torchkiln.reset()
    with monkeypatch.context() as m:
        m.setattr(config, "persist_captures", False)  # a stored record would be reused
        if not distinct_guards:
            m.setattr(frame_capture, "guard_distinct_objects", lambda output: None)
        torchkiln.compile(fn, backend="eager")(*make_args())
    [entry] = _caches[fn.__code__].all_entries()
    return len(entry.guard_descriptions)


@pytest.mark.parametrize(
    "fn, make_args, extra",
    [
        (read_only, lambda: (torch.ones(2), [], []), 0),
        (mutate_a_dict_read_lists, lambda: (torch.ones(2), {}, [], []), 0),  # no other dict
        (append_then_len, lambda: (torch.ones(2), [], []), 1),
        (append_then_len3, lambda: (torch.ones(2), [], [], []), 1),
    ],
    ids=["read-only", "other-types", "two-lists", "three-lists"],
)
def test_guards_added_only_for_types_the_frame_mutates(fn, make_args, extra, monkeypatch):
    without = guard_count(fn, make_args, monkeypatch, distinct_guards=False)
    with_ = guard_count(fn, make_args, monkeypatch, distinct_guards=True)
    assert with_ - without == extra


def test_a_read_only_frame_is_reused_whatever_the_aliasing():
    compiled = torchkiln.compile(read_only, backend="eager")
    x = torch.ones(2)
    compiled(x, [1, 2], [1, 2])
    shared = [1, 2]
    assert_close(compiled(x, shared, shared), read_only(x, shared, shared))
    assert frames() == 1
