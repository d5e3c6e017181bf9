"""Spec (issue 4): ``torchkiln.explain(fn)(*args)`` and ``TORCHKILN_LOGS=graph_breaks``.

``explain`` reports ``graphs``, ``graph_count``, ``graph_break_count``,
``break_reasons`` (each with ``.reason`` and ``.location`` "file:line"),
``ops_per_graph`` and ``guards``, and prints as a readable summary. Its
counts agree with what a recording backend sees for the same function. The
``graph_breaks`` log artifact names each distinct break once.
"""

import logging
import os

import torch

import torchkiln
from kiln_testing import assert_location, kiln_logs, run_both, source_location


def seeds_example(inputs):
    x = inputs["x"]
    y = inputs["y"]
    x = x.cos().cos()
    if x.mean() > 0.5:  # <- break
        x = x / 1.1
    return x * y


def two_prints(x):
    a = x.sin()
    print("first")  # <- first
    b = a.cos()
    print("second")  # <- second
    return b.exp()


def no_break(x):
    return x.sin().cos()


def item_break(x):
    y = x.abs()
    n = y.sum().item()  # <- item
    return y * n


def seeds_args():
    return ({"x": torch.randn(10, requires_grad=True), "y": torch.randn(10, requires_grad=True)},)


def graph_break_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "artifact", "") == "graph_breaks"]


def test_explain_seeds_example(backend):
    explained = torchkiln.explain(seeds_example)(*seeds_args())
    assert explained.graph_count == 2
    assert len(explained.graphs) == 2
    assert explained.graph_break_count == 1
    assert len(explained.break_reasons) == 1
    assert_location(explained.break_reasons[0].location, seeds_example, "# <- break")
    assert explained.break_reasons[0].reason
    run_both(seeds_example, *seeds_args(), backend=backend)
    assert backend.graph_count == explained.graph_count


def test_explain_function_without_breaks(backend):
    explained = torchkiln.explain(no_break)(torch.randn(3))
    assert explained.graph_count == 1
    assert explained.graph_break_count == 0
    assert list(explained.break_reasons) == []
    assert isinstance(explained.graphs[0], torch.fx.GraphModule)
    run_both(no_break, torch.randn(3), backend=backend)
    assert backend.graph_count == 1


def test_explain_lists_break_reasons_in_program_order(backend, capsys):
    explained = torchkiln.explain(two_prints)(torch.randn(3))
    assert capsys.readouterr().out == "first\nsecond\n", "explain runs the function once"
    assert explained.graph_count == 3
    assert explained.graph_break_count == 2
    locations = [r.location for r in explained.break_reasons]
    assert_location(locations[0], two_prints, "# <- first")
    assert_location(locations[1], two_prints, "# <- second")
    assert all("print" in r.reason for r in explained.break_reasons)
    run_both(two_prints, torch.randn(3), backend=backend)
    assert backend.graph_count == explained.graph_count


def test_explain_ops_per_graph(backend):
    explained = torchkiln.explain(two_prints)(torch.randn(3))
    assert [len(ops) for ops in explained.ops_per_graph] == [1, 1, 1]
    explained = torchkiln.explain(no_break)(torch.randn(3))
    assert [len(ops) for ops in explained.ops_per_graph] == [2]
    run_both(no_break, torch.randn(3), backend=backend)
    assert backend.op_counts == [2]


def test_explain_reports_guards(backend):
    explained = torchkiln.explain(no_break)(torch.randn(3))
    assert len(explained.guards) > 0
    run_both(no_break, torch.randn(3), backend=backend)
    assert backend.graph_count == 1


def test_explain_item_break_reason(backend):
    explained = torchkiln.explain(item_break)(torch.randn(3))
    assert explained.graph_break_count == 1
    assert "item" in explained.break_reasons[0].reason
    assert_location(explained.break_reasons[0].location, item_break, "# <- item")
    run_both(item_break, torch.randn(3), backend=backend)
    assert backend.graph_count == explained.graph_count == 2


def test_explain_prints_a_readable_summary(backend):
    explained = torchkiln.explain(two_prints)(torch.randn(3))
    text = str(explained)
    assert "3" in text and "2" in text, text
    for r in explained.break_reasons:
        assert r.location in text, f"{r.location} missing from the summary:\n{text}"
    run_both(two_prints, torch.randn(3), backend=backend)
    assert backend.graph_count == 3


def test_graph_breaks_log_names_each_distinct_break_once(backend, caplog, capsys):
    compiled = torchkiln.compile(two_prints, backend=backend)
    with kiln_logs("graph_breaks"), caplog.at_level(logging.INFO, logger="torchkiln"):
        for _ in range(3):
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), x.sin().cos().exp())
    messages = graph_break_messages(caplog)
    assert len(messages) == 2, messages
    for message, marker in zip(messages, ("# <- first", "# <- second")):
        file, line = source_location(two_prints, marker)
        assert "print" in message, message
        assert f"{os.path.basename(file)}:{line}" in message, message
    assert backend.graph_count == 3


def test_graph_breaks_log_once_for_a_break_met_in_every_loop_iteration(backend, caplog, capsys):
    def fn(x):
        for i in range(3):
            x = x + i
            print(i)
        return x

    compiled = torchkiln.compile(fn, backend=backend)
    with kiln_logs("graph_breaks"), caplog.at_level(logging.INFO, logger="torchkiln"):
        x = torch.randn(2)
        torch.testing.assert_close(compiled(x), x + 3)
    assert len(graph_break_messages(caplog)) == 1, graph_break_messages(caplog)
    assert backend.graph_count == 3


def test_graph_breaks_log_is_off_by_default(backend, caplog, capsys):
    compiled = torchkiln.compile(two_prints, backend=backend)
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), x.sin().cos().exp())
    assert graph_break_messages(caplog) == []
    assert backend.graph_count == 3
