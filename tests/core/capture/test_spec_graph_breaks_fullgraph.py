"""Spec (issue 4): ``fullgraph=True`` raises ``Unsupported`` at the first break, before running anything.

The error carries ``.reason`` (naming the construct) and ``.location``, the
user's ``file:line`` of the construct (the line marked ``# <- break``).
Nothing of the function may have run: no side effect, no printed output, no
graph compiled.
"""

import logging
import zlib

import numpy as np
import pytest
import torch

import torchkiln
from kiln_testing import assert_location

user_log = logging.getLogger("user_code")


def breaks_on_print(x, log):
    log.append("started")
    y = x.sin()
    print("hello")  # <- break
    return y


def breaks_on_item(x, log):
    log.append("started")
    return x * x.sum().item()  # <- break


def breaks_on_tolist(x, log):
    log.append("started")
    return x.cos().tolist()  # <- break


def breaks_on_numpy(x, log):
    log.append("started")
    return x + torch.from_numpy(np.random.rand(3))  # <- break


def breaks_on_data_dependent_if(x, log):
    log.append("started")
    if x.sum() > 0:  # <- break
        return x + 1
    return x - 1


def breaks_on_logging(x, log):
    log.append("started")
    user_log.warning("value")  # <- break
    return x


def breaks_on_unknown_c_function(x, log):
    log.append("started")
    return x * zlib.crc32(b"kiln")  # <- break


@pytest.mark.parametrize(
    ("fn", "keyword"),
    [
        (breaks_on_print, "print"),
        (breaks_on_item, "item"),
        (breaks_on_tolist, "tolist"),
        (breaks_on_numpy, "numpy"),
        (breaks_on_data_dependent_if, None),
        (breaks_on_logging, "warning"),
        (breaks_on_unknown_c_function, "crc32"),
    ],
    ids=["print", "item", "tolist", "numpy", "data_dependent_if", "logging", "c_function"],
)
def test_fullgraph_raises_unsupported_with_reason_and_location(backend, capsys, fn, keyword):
    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    log = []
    with pytest.raises(torchkiln.exc.Unsupported) as info:
        compiled(torch.randn(3), log)
    error = info.value
    assert error.reason, "Unsupported.reason is empty"
    if keyword is not None:
        assert keyword in error.reason.lower(), f"reason {error.reason!r} should name {keyword!r}"
    assert_location(error.location, fn, "# <- break")
    assert log == [], f"the function ran before the error: {log}"
    assert capsys.readouterr().out == "", "output was printed before the error"
    assert backend.graph_count == 0, f"{backend.graph_count} graph(s) compiled before the error"


def test_fullgraph_reports_the_first_of_several_breaks(backend):
    def fn(x):
        y = x.sin()
        n = y.sum().item()  # <- first
        print(n)
        return y

    with pytest.raises(torchkiln.exc.Unsupported) as info:
        torchkiln.compile(fn, backend=backend, fullgraph=True)(torch.randn(3))
    assert_location(info.value.location, fn, "# <- first")
    assert backend.graph_count == 0


def test_fullgraph_location_points_into_the_inlined_callee(backend):
    def callee(t):
        return t.tolist()  # <- break

    def fn(x):
        return callee(x * 2)

    with pytest.raises(torchkiln.exc.Unsupported) as info:
        torchkiln.compile(fn, backend=backend, fullgraph=True)(torch.randn(3))
    assert_location(info.value.location, callee, "# <- break")
    assert backend.graph_count == 0


def test_fullgraph_break_inside_a_loop(backend, capsys):
    def fn(x):
        for i in range(3):
            x = x + i
            print(i)  # <- break
        return x

    with pytest.raises(torchkiln.exc.Unsupported) as info:
        torchkiln.compile(fn, backend=backend, fullgraph=True)(torch.randn(3))
    assert_location(info.value.location, fn, "# <- break")
    assert capsys.readouterr().out == ""
    assert backend.graph_count == 0


def test_fullgraph_break_inside_a_compiled_module(backend):
    class Printing(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            print("forward")  # <- break
            return y

    compiled = torchkiln.compile(Printing(), backend=backend, fullgraph=True)
    with pytest.raises(torchkiln.exc.Unsupported) as info:
        compiled(torch.randn(3))
    assert_location(info.value.location, Printing.forward, "# <- break")
    assert backend.graph_count == 0


def test_fullgraph_raises_again_on_the_next_call(backend):
    compiled = torchkiln.compile(breaks_on_item, backend=backend, fullgraph=True)
    for _ in range(2):
        log = []
        with pytest.raises(torchkiln.exc.Unsupported):
            compiled(torch.randn(3), log)
        assert log == []
    assert backend.graph_count == 0
