"""Spec (issue 3): guards, the per-code cache, recompiles and the cache size limit.

Each assumption a cache entry relies on is guarded: changing one of them
recompiles exactly once (graph count 1 -> 2), and calling again with either
kind of input compiles nothing and returns eager's result. After
``config.cache_size_limit`` entries the function runs eagerly.
"""

import collections.abc
import copy
import logging
import sys

import pytest
import torch
from torch import nn

import torchkiln
from kiln_testing import assert_graph_count, assert_same, kiln_logs
from torchkiln.registry import lookup_backend

FACTOR = 2
GLOBAL_WEIGHT = torch.randn(3)
this_module = sys.modules[__name__]


def check_recompiles_once(fn, make_first, make_second, *, backend, before_second=None):
    """First kind of input: 1 graph; second kind: 2; both again: still 2, each result eager's."""
    compiled = torchkiln.compile(fn, backend=backend)
    first = make_first()
    assert_same(compiled(*first), fn(*first))
    assert_graph_count(backend, 1, "after the first call")
    second = make_second()
    assert_same(compiled(*second), fn(*second))
    assert_graph_count(backend, 2, "after the changed input (exactly one recompile)")
    for args in (make_first(), make_second(), make_first()):
        assert_same(compiled(*args), fn(*args))
    assert_graph_count(backend, 2, "after calling again with both kinds of input")
    assert torchkiln.counters["recompiles"]["total"] == 1, dict(torchkiln.counters["recompiles"])
    return compiled


def test_new_shape_recompiles_once(backend):
    check_recompiles_once(
        lambda x: x.sin() + 1,
        lambda: (torch.randn(3, 4),),
        lambda: (torch.randn(5, 4),),
        backend=backend,
    )


def test_new_rank_recompiles_once(backend):
    check_recompiles_once(
        lambda x: x.cos().sum(-1),
        lambda: (torch.randn(4),),
        lambda: (torch.randn(2, 4),),
        backend=backend,
    )


def test_new_dtype_recompiles_once(backend):
    check_recompiles_once(
        lambda x: x * 2 + 1,
        lambda: (torch.randn(4),),
        lambda: (torch.randn(4, dtype=torch.float64),),
        backend=backend,
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (no GPU here)")
def test_new_device_recompiles_once(backend):
    check_recompiles_once(
        lambda x: x.exp() - 1,
        lambda: (torch.randn(4),),
        lambda: (torch.randn(4, device="cuda"),),
        backend=backend,
    )


def test_requires_grad_change_recompiles_once(backend):
    check_recompiles_once(
        lambda x: x.tanh() * 3,
        lambda: (torch.randn(4),),
        lambda: (torch.randn(4, requires_grad=True),),
        backend=backend,
    )


def test_transposed_input_with_other_strides_recompiles_once(backend):
    check_recompiles_once(
        lambda x: x + torch.arange(4.0),
        lambda: (torch.randn(4, 4),),
        lambda: (torch.randn(4, 4).t(),),
        backend=backend,
    )


def test_constant_int_argument_recompiles_once(backend):
    check_recompiles_once(
        lambda x, n: x * n + n,
        lambda: (torch.randn(3), 2),
        lambda: (torch.randn(3), 5),
        backend=backend,
    )


def test_constant_string_argument_recompiles_once(backend):
    def fn(x, mode):
        return x.relu() if mode == "relu" else x.sigmoid()

    check_recompiles_once(
        fn, lambda: (torch.randn(3), "relu"), lambda: (torch.randn(3), "sigmoid"), backend=backend
    )


def test_argument_type_change_recompiles_once(backend):
    check_recompiles_once(
        lambda x, y: x + y,
        lambda: (torch.randn(3), torch.randn(3)),
        lambda: (torch.randn(3), 1.5),
        backend=backend,
    )


def test_list_length_change_recompiles_once(backend):
    check_recompiles_once(
        lambda xs: torch.stack(xs).sum(0),
        lambda: ([torch.randn(2) for _ in range(2)],),
        lambda: ([torch.randn(2) for _ in range(3)],),
        backend=backend,
    )


def test_dict_keys_change_recompiles_once(backend):
    def fn(d):
        return sum(v * i for i, v in enumerate(d.values()))

    check_recompiles_once(
        fn,
        lambda: ({"a": torch.randn(2), "b": torch.randn(2)},),
        lambda: ({"a": torch.randn(2), "c": torch.randn(2), "b": torch.randn(2)},),
        backend=backend,
    )


def test_module_instance_with_other_shapes_recompiles_once(backend):
    # an instance with the same shapes shares the graph (test_soundness_modules.py)
    first, second = nn.Linear(3, 3), nn.Linear(3, 5)

    def fn(mod, x):
        return mod(x).relu()

    check_recompiles_once(
        fn,
        lambda: (first, torch.randn(2, 3)),
        lambda: (second, torch.randn(2, 3)),
        backend=backend,
    )


def test_module_training_flag_recompiles_once(backend):
    mod = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    eager = copy.deepcopy(mod)
    compiled = torchkiln.compile(mod, backend=backend)

    def call_both(training: bool) -> None:
        mod.train(training)
        eager.train(training)
        compiled.train(training)
        x = torch.randn(6, 4)
        assert_same(compiled(x), eager(x))
        assert_same(mod.state_dict(), eager.state_dict())

    call_both(True)
    assert_graph_count(backend, 1, "after the call in training mode")
    call_both(False)
    assert_graph_count(backend, 2, "after switching to eval mode")
    call_both(True)
    call_both(False)
    assert_graph_count(backend, 2, "after switching back and forth")


def test_module_python_attribute_change_recompiles_once(backend):
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return x * self.scale

    mod = Scaled()
    compiled = torchkiln.compile(mod, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2.0)
    mod.scale = 3.0
    torch.testing.assert_close(compiled(x), x * 3.0)
    assert_graph_count(backend, 2, "after changing mod.scale")
    mod.scale = 2.0
    torch.testing.assert_close(compiled(x), x * 2.0)
    assert_graph_count(backend, 2, "after restoring mod.scale")


def test_global_value_change_recompiles_once(backend, monkeypatch):
    def fn(x):
        return x * FACTOR

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    monkeypatch.setattr(this_module, "FACTOR", 7)
    torch.testing.assert_close(compiled(x), x * 7)
    assert_graph_count(backend, 2, "after changing the global FACTOR")
    monkeypatch.setattr(this_module, "FACTOR", 2)
    torch.testing.assert_close(compiled(x), x * 2)
    assert_graph_count(backend, 2, "after restoring the global FACTOR")


def test_global_tensor_replaced_with_another_shape_recompiles_once(backend, monkeypatch):
    def fn(x):
        return x + GLOBAL_WEIGHT

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), x + GLOBAL_WEIGHT)
    monkeypatch.setattr(this_module, "GLOBAL_WEIGHT", torch.randn(2, 1))
    torch.testing.assert_close(compiled(x), x + GLOBAL_WEIGHT)
    assert_graph_count(backend, 2, "after replacing GLOBAL_WEIGHT with a (2, 1) tensor")


def test_closure_cell_value_change_recompiles_once(backend):
    scale = 2.0

    def fn(x):
        return x * scale

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2.0)
    scale = 5.0
    torch.testing.assert_close(compiled(x), x * 5.0)
    assert_graph_count(backend, 2, "after changing the closure variable")
    scale = 2.0
    torch.testing.assert_close(compiled(x), x * 2.0)
    assert_graph_count(backend, 2, "after restoring the closure variable")


def test_default_dtype_change_recompiles_once(backend):
    def fn(x):
        return x + torch.ones(3)

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    assert_same(compiled(x), fn(x))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert_same(compiled(x), fn(x))
    finally:
        torch.set_default_dtype(previous)
    assert_graph_count(backend, 2, "after changing the default dtype")
    assert_same(compiled(x), fn(x))
    assert_graph_count(backend, 2, "after restoring the default dtype")


def test_same_kind_of_inputs_with_new_values_hit_the_cache(backend):
    compiled = torchkiln.compile(lambda x, y: x @ y, backend=backend)
    for _ in range(5):
        x, y = torch.randn(2, 3), torch.randn(3, 2)
        torch.testing.assert_close(compiled(x, y), x @ y)
    assert_graph_count(backend, 1)
    assert torchkiln.counters["recompiles"]["total"] == 0


def test_functions_sharing_a_code_object_share_the_cache(backend):
    def make():
        def fn(x):
            return x.sin() * 2

        return fn

    f1, f2 = make(), make()
    assert f1.__code__ is f2.__code__
    c1 = torchkiln.compile(f1, backend=backend)
    c2 = torchkiln.compile(f2, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(c1(x), x.sin() * 2)
    torch.testing.assert_close(c2(x), x.sin() * 2)
    assert_graph_count(backend, 1, "after calling two functions sharing one code object")


def test_reset_clears_every_cache(backend):
    compiled = torchkiln.compile(lambda x: x + 1, backend=backend)
    x = torch.randn(3)
    compiled(x)
    torchkiln.reset()
    torch.testing.assert_close(compiled(x), x + 1)
    assert_graph_count(backend, 2, "after reset() and a call with the same input")


def test_counters_for_frames_misses_and_recompiles(backend):
    compiled = torchkiln.compile(lambda x: x * 3, backend=backend)
    for n in (2, 2, 4):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x * 3)
    counters = torchkiln.counters
    assert counters["frames"]["total"] == 2, dict(counters["frames"])
    assert counters["frames"]["ok"] == 2, dict(counters["frames"])
    assert counters["cache"]["misses"] == 2, dict(counters["cache"])
    assert counters["recompiles"]["total"] == 1, dict(counters["recompiles"])
    assert_graph_count(backend, 2)


def test_cache_size_limit_falls_back_to_eager(backend, monkeypatch):
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 2)
    compiled = torchkiln.compile(lambda x: x.cos() * x.shape[0], backend=backend, dynamic=False)
    for n in (1, 2, 3, 4, 5):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x.cos() * n)
    assert_graph_count(backend, 2, "with cache_size_limit=2 and five shapes")
    assert sum(torchkiln.counters["eager_fallback"].values()) >= 1, dict(
        torchkiln.counters["eager_fallback"]
    )


def test_cached_entries_still_run_after_the_limit_is_hit(backend, monkeypatch):
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 1)
    compiled = torchkiln.compile(lambda x: x.exp(), backend=backend)
    for n in (2, 3, 2, 3):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x.exp())
    assert_graph_count(backend, 1, "with cache_size_limit=1")


def test_default_cache_size_limit_is_eight(backend):
    assert torchkiln.config.cache_size_limit == 8
    compiled = torchkiln.compile(lambda x, n: x + n, backend=backend)
    for n in range(10):
        x = torch.randn(2)
        torch.testing.assert_close(compiled(x, n), x + n)
    assert_graph_count(backend, 8, "after ten distinct constant arguments")


def test_cache_limit_fallback_is_logged_once(backend, monkeypatch, caplog):
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 1)

    def fn(activations):
        return activations * 2

    compiled = torchkiln.compile(fn, backend=backend)
    compiled(torch.randn(1))
    with caplog.at_level(logging.INFO, logger="torchkiln"):
        for n in (2, 3, 4):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), x * 2)
    records = [r for r in caplog.records if r.name.startswith("torchkiln")]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert "activations" in records[0].getMessage(), "the line should name the failing guard"


def test_recompiles_log_names_the_failing_guard_and_the_source(backend, caplog):
    def fn(activations):
        return activations + 1

    compiled = torchkiln.compile(fn, backend=backend)
    with kiln_logs("recompiles"), caplog.at_level(logging.INFO, logger="torchkiln"):
        for n in (2, 3):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), x + 1)
    messages = [
        r.getMessage() for r in caplog.records if getattr(r, "artifact", "") == "recompiles"
    ]
    assert len(messages) == 1, messages
    assert "activations" in messages[0], messages[0]
    assert "test_spec_guards_recompiles.py:" in messages[0], messages[0]


def test_guards_log_prints_one_guard_function_per_entry(backend, caplog):
    def fn(activations):
        return activations - 1

    compiled = torchkiln.compile(fn, backend=backend)
    with kiln_logs("guards"), caplog.at_level(logging.INFO, logger="torchkiln"):
        for shape in ((2,), (2,), (2, 2)):
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), x - 1)
    messages = [r.getMessage() for r in caplog.records if getattr(r, "artifact", "") == "guards"]
    assert len(messages) == 2, messages
    assert all("activations" in m for m in messages), messages


def test_error_on_recompile_limit_raises(backend, monkeypatch):
    monkeypatch.setattr(torchkiln.config, "cache_size_limit", 1)
    monkeypatch.setattr(torchkiln.config, "error_on_recompile_limit", True)
    compiled = torchkiln.compile(lambda x: x + 2, backend=backend)
    x = torch.randn(2)
    torch.testing.assert_close(compiled(x), x + 2)
    with pytest.raises(torchkiln.exc.RecompileLimitExceeded):
        compiled(torch.randn(3))
    assert_graph_count(backend, 1)


def test_aliased_arguments_do_not_reuse_the_entry_for_distinct_ones(backend):
    def fn(a, b):
        a.add_(1)
        return b * 2

    compiled = torchkiln.compile(fn, backend=backend)

    def call(aliased: bool) -> None:
        x = torch.randn(3)
        y = x if aliased else torch.randn(3)
        ex = x.clone()
        ey = ex if aliased else y.clone()
        assert_same(compiled(x, y), fn(ex, ey))
        assert_same(x, ex)

    call(aliased=False)
    assert_graph_count(backend, 1, "after distinct arguments")
    call(aliased=True)
    assert_graph_count(backend, 2, "after the same tensor passed twice")
    call(aliased=False)
    call(aliased=True)
    assert_graph_count(backend, 2, "after calling again with both")


class Options:
    def __init__(self, use_relu: bool):
        self.use_relu = use_relu


def helper_activation(t):
    return t.sigmoid()


def test_plain_object_attribute_change_recompiles_once(backend):
    def fn(x, opts):
        return x.relu() if opts.use_relu else x.tanh()

    check_recompiles_once(
        fn,
        lambda: (torch.randn(3), Options(True)),
        lambda: (torch.randn(3), Options(False)),
        backend=backend,
    )


def test_optional_argument_none_then_tensor_recompiles_once(backend):
    def fn(x, bias):
        return x * 2 if bias is None else x * 2 + bias

    check_recompiles_once(
        fn,
        lambda: (torch.randn(3), None),
        lambda: (torch.randn(3), torch.randn(3)),
        backend=backend,
    )


def test_dict_constant_value_change_recompiles_once(backend):
    def fn(x, opts):
        return x * opts["scale"]

    check_recompiles_once(
        fn,
        lambda: (torch.randn(3), {"scale": 2}),
        lambda: (torch.randn(3), {"scale": 3}),
        backend=backend,
    )


def test_list_element_type_change_recompiles_once(backend):
    def fn(x, items):
        return x + items[0]

    check_recompiles_once(
        fn,
        lambda: (torch.randn(3), [1]),
        lambda: (torch.randn(3), [torch.randn(3)]),
        backend=backend,
    )


def test_replaced_global_function_recompiles_once_and_is_used(backend, monkeypatch):
    def fn(x):
        return helper_activation(x) * 2

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x.sigmoid() * 2)
    monkeypatch.setattr(this_module, "helper_activation", torch.cos)
    torch.testing.assert_close(compiled(x), x.cos() * 2)
    assert_graph_count(backend, 2, "after replacing the global helper_activation")
    monkeypatch.undo()
    torch.testing.assert_close(compiled(x), x.sigmoid() * 2)
    assert_graph_count(backend, 2, "after restoring helper_activation")


def test_aliased_call_after_a_distinct_call_is_correct_with_aot_eager(backend):
    """A functionalizing backend compiled for distinct inputs is wrong on aliased ones."""
    aot_eager = lookup_backend("aot_eager").compile_fn

    def recording_aot_eager(gm, example_inputs):
        backend(gm, example_inputs)
        return aot_eager(gm, example_inputs)

    def fn(a, b):
        a.add_(1)
        return b * 2

    compiled = torchkiln.compile(fn, backend=recording_aot_eager)
    x, y = torch.randn(3), torch.randn(3)
    ex, ey = x.clone(), y.clone()
    assert_same(compiled(x, y), fn(ex, ey))
    z = torch.randn(3)
    ez = z.clone()
    assert_same(compiled(z, z), fn(ez, ez))
    assert_same(z, ez)
    assert_graph_count(backend, 2, "after a distinct and an aliased call")


class Registry(dict):
    """A dict subclass: ``in`` runs dict.__contains__, which capture answers and guards."""


ACTIVATIONS = Registry(relu=torch.relu)


def test_membership_in_a_registry_is_guarded_and_recompiles_when_it_changes(backend):
    def fn(x):
        if "gelu" in ACTIVATIONS:
            return x * 2
        return x - 1

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    assert_same(compiled(x), fn(x))
    assert_same(compiled(x), fn(x))
    assert_graph_count(backend, 1, "before the registry changed")
    ACTIVATIONS["gelu"] = torch.nn.functional.gelu
    try:
        assert_same(compiled(x), x * 2)
        assert_graph_count(backend, 2, "after 'gelu' was registered")
    finally:
        del ACTIVATIONS["gelu"]


def test_class_of_a_module_is_known_at_capture_time(backend):
    class Scaled(nn.Module):
        def forward(self, x):
            return x * len(str(self.__class__.__name__))

    model = Scaled()
    compiled = torchkiln.compile(model, backend=backend)
    x = torch.randn(3)
    assert_same(compiled(x), model(x))
    assert_graph_count(backend, 1, "on the first call")


class Table(collections.abc.Mapping):
    """A Mapping whose ``in`` (the ABC's ``__contains__``) reads an attribute."""

    def __init__(self):
        self.data = {}

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


TABLE = Table()


def test_membership_sees_an_attribute_the_frame_set_before_it(backend):
    def fn(x):
        TABLE.data = {"a": 1}
        if "a" in TABLE:
            return x + 1
        return x - 1

    x = torch.randn(3)
    TABLE.data = {}
    expected = fn(x)
    TABLE.data = {}
    assert_same(torchkiln.compile(fn, backend=backend)(x), expected)
