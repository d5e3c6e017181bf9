"""Spec (issue 3): unsupported code never gives a wrong result; ``fullgraph=True`` turns it into an error.

The error is ``torchkiln.exc.Unsupported`` (a ``KilnError``) whose message
carries the reason and the user's ``file:line``. Functions with nothing
unsupported compile to one graph under ``fullgraph=True``.
"""

import pytest
import torch

import torchkiln
from kiln_testing import assert_location, check_compiled


def unsupported_item(x):
    return x + x.max().item()  # <- unsupported


def test_fullgraph_on_a_supported_function_is_one_graph(backend):
    def fn(x, y):
        return (x @ y).relu().sum(-1)

    check_compiled(
        fn,
        lambda: (torch.randn(2, 3), torch.randn(3, 4)),
        backend=backend,
        graphs=1,
        fullgraph=True,
    )


def test_fullgraph_on_a_module_without_breaks_is_one_graph(backend):
    mod = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    compiled = torchkiln.compile(mod, backend=backend, fullgraph=True)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), mod(x))
    assert backend.graph_count == 1


def test_unsupported_is_a_kiln_error(backend):
    compiled = torchkiln.compile(unsupported_item, backend=backend, fullgraph=True)
    with pytest.raises(torchkiln.exc.KilnError):
        compiled(torch.randn(3))
    assert backend.graph_count == 0


def test_unsupported_message_names_reason_and_location(backend):
    compiled = torchkiln.compile(unsupported_item, backend=backend, fullgraph=True)
    with pytest.raises(torchkiln.exc.Unsupported) as info:
        compiled(torch.randn(3))
    message = str(info.value)
    assert info.value.reason in message
    assert info.value.location in message
    assert_location(info.value.location, unsupported_item, "# <- unsupported")


def test_fullgraph_as_decorator_argument(backend):
    @torchkiln.compile(backend=backend, fullgraph=True)
    def fn(x):
        return x.tolist()  # <- unsupported

    with pytest.raises(torchkiln.exc.Unsupported) as info:
        fn(torch.randn(2))
    assert "tolist" in info.value.reason
    assert backend.graph_count == 0


def test_without_fullgraph_unsupported_code_gives_eager_results(backend):
    def fn(x):
        y = x.exp()
        return y / y.sum().item()

    check_compiled(fn, lambda: (torch.linspace(-1, 1, 5),), backend=backend, graphs=2, breaks=1)


def test_unsupported_call_with_a_tensor_argument_gives_eager_results(backend):
    def fn(x):
        y = x * 2
        as_list = y.tolist()
        return torch.tensor(as_list) + y

    check_compiled(fn, lambda: (torch.linspace(0, 1, 4),), backend=backend, graphs=2, breaks=1)


def test_exception_raised_by_the_user_function_propagates(backend):
    def fn(x):
        if x.shape[0] > 2:
            raise ValueError("too many rows")
        return x + 1

    compiled = torchkiln.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(ValueError, match="too many rows"):
        compiled(torch.randn(3))
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert backend.graph_count == 1, f"{backend.graph_count} graphs"
