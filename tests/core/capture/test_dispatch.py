"""The per-code-object cache and its dispatch wrapper."""

import pytest
import torch

import torchkiln
from kiln_testing import RecordingBackend
from torchkiln.capture import dispatch as cache_module
from torchkiln.capture import optimize
from torchkiln.capture.dispatch import _caches


def make_scaler(k):
    def scale(x):
        return x * k

    return scale


def test_functions_sharing_a_code_object_share_its_cache(backend):
    first, second = make_scaler(2), make_scaler(2)
    torchkiln.compile(first, backend=backend)(torch.ones(2))
    torchkiln.compile(second, backend=backend)(torch.ones(2))
    assert first.__code__ is second.__code__
    assert backend.graph_count == 1
    assert torchkiln.counters["cache"]["hits"] == 1


def test_closure_value_change_recompiles_the_shared_code(backend):
    torchkiln.compile(make_scaler(2), backend=backend)(torch.ones(2))
    out = torchkiln.compile(make_scaler(3), backend=backend)(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 3.0))
    assert backend.graph_count == 2


def test_entries_of_different_backends_are_kept_apart():
    fn = make_scaler(2)
    first, second = RecordingBackend(), RecordingBackend()
    torchkiln.compile(fn, backend=first)(torch.ones(2))
    torchkiln.compile(fn, backend=second)(torch.ones(2))
    assert (first.graph_count, second.graph_count) == (1, 1)


def test_cache_hits_are_counted(backend):
    compiled = torchkiln.compile(make_scaler(2), backend=backend)
    for _ in range(3):
        compiled(torch.ones(2))
    assert torchkiln.counters["cache"]["hits"] == 2
    assert torchkiln.counters["cache"]["misses"] == 1


def test_reset_clears_entries_and_counters(backend):
    compiled = torchkiln.compile(make_scaler(2), backend=backend)
    compiled(torch.ones(2))
    torchkiln.reset()
    assert not any(cache.all_entries() for cache in _caches.values())
    assert sum(torchkiln.counters["frames"].values()) == 0
    compiled(torch.ones(2))
    assert backend.graph_count == 2


def test_keyword_arguments_and_defaults_bind_like_python(backend):
    def fn(x, scale=2.0, *, shift=1.0):
        return x * scale + shift

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x, shift=1.0), fn(x, shift=1.0))
    torch.testing.assert_close(compiled(scale=3.0, x=x), fn(x, 3.0))
    assert backend.graph_count == 2


def test_varargs_and_kwargs_are_frame_locals(backend):
    def fn(*tensors, **options):
        return sum(tensors) * options["k"]

    compiled = torchkiln.compile(fn, backend=backend)
    a, b = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(compiled(a, b, k=3), (a + b) * 3)
    torch.testing.assert_close(compiled(a, b, k=3), (a + b) * 3)
    assert backend.graph_count == 1


def test_a_wrong_call_raises_the_same_type_error_as_python(backend):
    compiled = torchkiln.compile(make_scaler(2), backend=backend)
    with pytest.raises(TypeError):
        compiled(torch.ones(1), torch.ones(1))


def test_cache_size_limit_runs_new_inputs_eagerly(backend, monkeypatch):
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 2)
    compiled = torchkiln.compile(make_scaler(2), backend=backend, dynamic=False)
    for n in range(1, 5):
        torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert backend.graph_count == 2
    assert torchkiln.counters["eager_fallback"]["cache_size_limit"] == 2


def test_calls_past_the_cache_size_limit_build_its_message_once(backend, monkeypatch):
    """The message runs the failing entry's guards one by one: only the warning needs it."""
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 1)
    reports = []
    failed_guard = cache_module._failed_guard
    monkeypatch.setattr(
        cache_module, "_failed_guard", lambda *a: reports.append(a) or failed_guard(*a)
    )
    compiled = torchkiln.compile(make_scaler(2), backend=backend)
    for n in range(1, 6):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x * 2)
    assert torchkiln.counters["eager_fallback"]["cache_size_limit"] == 4
    assert len(reports) == 1


def test_error_on_recompile_limit_raises(backend, monkeypatch):
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 1)
    monkeypatch.setattr(torchkiln.config, "error_on_recompile_limit", True)
    compiled = torchkiln.compile(make_scaler(2), backend=backend)
    compiled(torch.ones(1))
    with pytest.raises(torchkiln.exc.RecompileLimitExceeded, match="cache_size_limit"):
        compiled(torch.ones(2))


def test_bound_methods_of_two_instances_share_one_graph_reading_their_own_self(backend):
    first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    x = torch.randn(1, 2)
    torch.testing.assert_close(optimize(first.forward, compile_graph=backend)(x), first(x))
    torch.testing.assert_close(optimize(second.forward, compile_graph=backend)(x), second(x))
    assert backend.graph_count == 1


def test_parameters_are_lifted_as_graph_inputs(backend):
    model = torch.nn.Linear(2, 3)
    optimize(model.forward, compile_graph=backend)(torch.randn(1, 2))
    inputs = backend.example_inputs[0]
    assert any(t is model.weight for t in inputs) and any(t is model.bias for t in inputs)


def test_a_dynamic_value_other_than_none_true_false_is_refused_clearly():
    with pytest.raises(TypeError, match="dynamic must be None, True or False"):
        optimize(make_scaler(2), compile_graph=RecordingBackend(), dynamic=1)
