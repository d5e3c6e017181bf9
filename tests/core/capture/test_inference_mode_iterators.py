"""Spec (issue 17 leftovers): ``torch.inference_mode`` inside the compiled function, and
class-based iterators (``__iter__`` returning self, a Python ``__next__``).

Inference-mode regions are switches in the graph: outputs are inference tensors exactly
where eager makes them, the mode is left as found (also after a graph break inside), and an
in-place update of an inference tensor outside the mode raises eager's error."""

import pytest
import torch

import torchkiln
from kiln_testing import check_compiled


def leaf():
    return (torch.randn(3, requires_grad=True),)


def flags(out):
    return [t.is_inference() if isinstance(t, torch.Tensor) else t for t in out]


def compare(fn, **kwargs):
    compiled = torchkiln.compile(fn, **kwargs)
    for _ in range(2):
        (x,) = leaf()
        expected, actual = fn(x), compiled(x)
        torch.testing.assert_close(actual, expected)
        assert flags(actual) == flags(expected)
        assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()


@torch.inference_mode()
def doubled(a):
    return a * 2


def test_inference_mode_nested_with_grad_modes_in_one_graph():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
            with torch.inference_mode(False):
                w = x + 1
            with torch.no_grad():
                v = y + 1
            on = torch.is_inference_mode_enabled()
        with torch.enable_grad():
            z = x + 3
        return y, w, v, z, on, torch.is_grad_enabled(), doubled(x), x * 4

    compare(fn, fullgraph=True)


def test_inference_mode_graph_break_inside_resumes_in_the_region():
    def fn(x):
        with torch.inference_mode():
            y = x * 2
            print("break")
            y = y + 1
            on = torch.is_inference_mode_enabled()
        return y, x + 1, on

    compare(fn)


def test_inplace_on_inference_tensor_outside_the_mode_raises_as_eager():
    def fn(x):
        y = torch.inference_mode()(lambda a: a * 2)(x)
        y.add_(1)
        return y

    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        fn(leaf()[0])
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        torchkiln.compile(fn)(leaf()[0])
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()


class Countdown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n


def test_class_iterators_in_loops_list_next_zip_enumerate(backend):
    def fn(x):
        for i in Countdown(3):
            x = x * 2 + i
        it = Countdown(1)
        first, after = next(it), next(it, -1)
        pairs = list(zip(Countdown(2), Countdown(3)))
        numbered = list(enumerate(Countdown(2), start=1))
        left = Countdown(4)
        head = next(iter(left))
        return x, list(Countdown(2)), first, after, pairs, numbered, head, left.n

    check_compiled(fn, leaf, backend=backend, graphs=1, fullgraph=True)


def test_a_graph_that_switches_inference_mode_says_it_runs_as_captured(caplog):
    import torchkiln
    from torchkiln import logs

    def fn(x):
        with torch.inference_mode():
            y = x * 2
        return y + 1

    torchkiln.reset()
    logs.set_logs("graph_breaks")
    try:
        compiled = torchkiln.compile(fn, backend="inductor", fullgraph=True)
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        logs.set_logs("")
    assert torchkiln.counters["graphs"]["run_as_captured"] == 1
    assert "runs as captured, not through the backend" in caplog.text
