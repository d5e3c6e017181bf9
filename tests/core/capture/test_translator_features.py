"""Translator features beyond the spec corpus: generators, super(), nonlocal, new objects."""

import torch

import torchkiln
from kiln_testing import check_compiled


def test_generator_function_is_run_to_exhaustion(backend):
    def squares(xs):
        for t in xs:
            yield t * t

    def fn(a, b):
        return sum(squares([a, b]))

    check_compiled(fn, lambda: (torch.randn(3), torch.randn(3)), backend=backend, graphs=1)


def test_zero_argument_super_calls_the_parent_method(backend):
    class Base(torch.nn.Module):
        def forward(self, x):
            return x + 1

    class Child(Base):
        def forward(self, x):
            return super().forward(x) * 2

    model = Child()
    check_compiled(model, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_nonlocal_assignment_is_replayed_into_the_cell(backend):
    count = 0

    def bump(x):
        nonlocal count
        count = count + 1
        return x * count

    out = torchkiln.compile(bump, backend=backend)(torch.ones(2))
    torch.testing.assert_close(out, torch.ones(2))
    assert count == 1


def test_instance_of_a_plain_class_built_in_the_frame_is_returned(backend):
    class Box:
        def __init__(self, value):
            self.value = value * 2

    def fn(x):
        return Box(x)

    x = torch.randn(2)
    box = torchkiln.compile(fn, backend=backend)(x)
    assert type(box) is Box
    torch.testing.assert_close(box.value, x * 2)
    assert backend.graph_count == 1


def test_sorted_with_a_key_function_over_python_values(backend):
    def fn(x, names):
        order = sorted(names, key=lambda n: len(n), reverse=True)
        return x * len(order[0]), order

    check_compiled(fn, lambda: (torch.randn(2), ["a", "ccc", "bb"]), backend=backend, graphs=1)


def test_set_grad_enabled_called_as_a_function_changes_the_mode_after_the_frame(backend):
    def fn(x):
        torch.set_grad_enabled(False)
        return x * 2

    try:
        out = torchkiln.compile(fn, backend=backend)(torch.randn(2, requires_grad=True))
        assert not torch.is_grad_enabled()
        assert not out.requires_grad
    finally:
        torch.set_grad_enabled(True)


def test_internal_translator_errors_fall_back_to_eager_without_fullgraph(backend, monkeypatch):
    from torchkiln.capture.translator import Translator

    def broken(self, inst):
        raise KeyError("bug")

    monkeypatch.setattr(Translator, "BINARY_OP", broken)
    x = torch.randn(2)
    torch.testing.assert_close(torchkiln.compile(lambda t: t + 1, backend=backend)(x), x + 1)
    assert backend.graph_count == 0


def test_internal_translator_errors_raise_capture_error_with_fullgraph(backend, monkeypatch):
    import pytest

    from torchkiln.capture.translator import Translator

    def broken(self, inst):
        raise KeyError("bug")

    monkeypatch.setattr(Translator, "BINARY_OP", broken)
    with pytest.raises(torchkiln.exc.CaptureError, match="BINARY_OP"):
        torchkiln.compile(lambda t: t + 1, backend=backend, fullgraph=True)(torch.randn(2))


def test_unbound_tensor_method_called_through_the_class_is_a_graph_op(backend):
    def fn(x, y):
        return torch.Tensor.add(x, y).relu()

    check_compiled(fn, lambda: (torch.randn(3), torch.randn(3)), backend=backend, graphs=1)
