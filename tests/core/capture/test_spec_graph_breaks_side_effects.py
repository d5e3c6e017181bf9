"""Spec (issue 4): side effects made before a break are applied before the eager part runs.

The eager part (here mostly a ``print``) must see every mutation the program
made before it, in program order, and mutations after the break must follow
it; printed output is compared with eager's through ``capsys``.
"""

import torch

import torchkiln
from kiln_testing import assert_graph_count, assert_same, check_compiled

COUNTER = {"value": 0}
LAST = None


class Holder:
    def __init__(self):
        self.items = []
        self.status = "new"


def test_append_then_print_shows_the_appended_item(backend, capsys):
    def fn(x, log):
        log.append("before")
        y = x.sin()
        print("log is", log)
        log.append("after")
        return y.cos()

    check_compiled(
        fn, lambda: (torch.randn(3), []), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_interleaved_appends_and_prints_keep_program_order(backend, capsys):
    def fn(x, log):
        log.append(1)
        a = x + 1
        print("first", log)
        log.append(2)
        b = a * 2
        print("second", log)
        log.append(3)
        return b

    check_compiled(
        fn, lambda: (torch.randn(3), [0]), backend=backend, graphs=2, breaks=2, capsys=capsys
    )


def test_dict_mutation_visible_to_the_eager_part(backend, capsys):
    def fn(x, d):
        d["rows"] = x.shape[0]
        d.pop("old")
        y = x * 3
        print(sorted(d.items()))
        return y

    check_compiled(
        fn,
        lambda: (torch.randn(4), {"old": 1, "keep": 2}),
        backend=backend,
        graphs=1,
        breaks=1,
        capsys=capsys,
    )


def test_setattr_visible_to_the_eager_part(backend, capsys):
    def fn(x, holder):
        holder.status = "running"
        holder.items.append(x.shape[0])
        y = x.exp()
        print(holder.status, holder.items)
        holder.status = "done"
        return y - 1

    check_compiled(
        fn, lambda: (torch.randn(2), Holder()), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_tensor_appended_before_the_break_holds_the_graph_value(backend, capsys):
    def fn(x, log):
        y = x * 10
        log.append(y)
        print("logged", log[0].round())
        return y + 1

    check_compiled(
        fn, lambda: (torch.randn(3), []), backend=backend, graphs=2, breaks=1, capsys=capsys
    )


def test_inplace_tensor_mutation_visible_to_the_eager_part(backend, capsys):
    def fn(x, buf):
        buf.add_(x)
        print("buf sum", round(float(buf.sum()), 4))
        return buf * 2

    check_compiled(
        fn,
        lambda: (torch.ones(3), torch.zeros(3)),
        backend=backend,
        graphs=2,
        breaks=2,
        capsys=capsys,
    )


def test_global_dict_mutation_visible_to_the_eager_part(backend, capsys):
    def fn(x):
        COUNTER["value"] += 1
        y = x.sin()
        print("counter", COUNTER["value"])
        return y

    compiled = torchkiln.compile(fn, backend=backend)
    COUNTER["value"] = 0
    x = torch.randn(3)
    expected = fn(x)
    eager_out = capsys.readouterr().out
    COUNTER["value"] = 0
    assert_same(compiled(x), expected)
    assert capsys.readouterr().out == eager_out == "counter 1\n"
    assert COUNTER["value"] == 1
    assert_graph_count(backend, 1)


def test_global_assignment_visible_to_the_eager_part(backend, capsys):
    global LAST

    def fn(x):
        global LAST
        LAST = "set before the break"
        y = x + 2
        print(LAST)
        LAST = "set after the break"
        return y

    compiled = torchkiln.compile(fn, backend=backend)
    LAST = None
    assert_same(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert capsys.readouterr().out == "set before the break\n"
    assert LAST == "set after the break"
    assert_graph_count(backend, 1)


def test_closure_list_mutation_before_and_after_a_break(backend, capsys):
    events = []

    def fn(x):
        events.append("a")
        y = x * 2
        print(events)
        events.append("b")
        return y.sum()

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), (x * 2).sum())
    assert_graph_count(backend, 2)
    torch.testing.assert_close(compiled(x), (x * 2).sum())
    assert capsys.readouterr().out == "['a']\n['a', 'b', 'a']\n"
    assert events == ["a", "b", "a", "b"]


def test_side_effects_in_a_loop_with_a_break_each_iteration(backend, capsys):
    def fn(x, log):
        for i in range(3):
            log.append(i)
            x = x + i
            print("after append", log)
        return x

    check_compiled(
        fn, lambda: (torch.randn(2), []), backend=backend, graphs=3, breaks=3, capsys=capsys
    )


def test_mutation_of_a_live_list_in_the_eager_part_is_seen_by_the_resume(backend):
    def fn(x, log):
        y = x.sin()
        log.append(len(str(y.shape)))
        log.extend(y.tolist())
        return y * len(log)

    check_compiled(fn, lambda: (torch.linspace(0, 1, 3), []), backend=backend, graphs=2, breaks=1)
