"""Registry lookups after the frame changed state, ``inspect.signature`` and ``@torch.no_grad()``
methods: the patterns behind HuggingFace models' graph breaks."""

import collections.abc
import inspect
import os

import pytest
import torch

import torchkiln
from kiln_testing import (
    ScaleRegistry,
    assert_graph_count,
    assert_same,
    check_compiled,
    graph_break_count,
)


class State:
    """A global object the frame writes to first, so that a side effect is pending."""

    flag = False


STATE = State()


SCALES = ScaleRegistry({"2": 3.0})


def test_c_lookup_in_a_registry_is_answered_after_a_pending_side_effect(backend):
    def fn(x):
        STATE.flag = True
        return x * SCALES.get(2)

    compiled = check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)
    SCALES["2"] = 5.0  # the guard re-runs the lookup: a recompile, not a stale 3.0
    try:
        x = torch.randn(3)
        assert_same(compiled(x), x * 5.0)
        assert_graph_count(backend, 2, "after the registry changed")
    finally:
        SCALES["2"] = 3.0


class Interface(collections.abc.MutableMapping):
    """Like transformers' ``GeneralInterface``: the ``Mapping`` mixins over a user ``__getitem__``."""

    _global = {"double": lambda x: x * 2}

    def __init__(self):
        self._local = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._global[key]

    def __setitem__(self, key, value):
        self._local[key] = value

    def __delitem__(self, key):
        del self._local[key]

    def __iter__(self):
        return iter({**self._global, **self._local})

    def __len__(self):
        return len(self._global.keys() | self._local.keys())


FUNCTIONS = Interface()


def test_mixin_lookup_after_a_pending_side_effect_inlines_getitem(backend):
    def fn(x):
        STATE.flag = True
        if FUNCTIONS.__contains__("double"):
            return FUNCTIONS.get("double", None)(x)
        return x

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_mixin_lookup_of_a_missing_key_after_a_side_effect_breaks_cleanly(backend):
    def fn(x):
        STATE.flag = True
        return x * 2 if FUNCTIONS.get("missing", None) is None else x

    # the inlined ``__getitem__`` cannot raise KeyError while tracing: the frame runs natively
    # from there (an eager entry or a graph break), never with a guessed answer
    STATE.flag = False
    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=(0, 1), breaks=(0, 1))
    assert STATE.flag


def test_mixin_lookup_without_side_effects_is_guarded(backend):
    local = Interface()

    def fn(x):
        return local.get("double", None)(x)

    compiled = check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)
    local["double"] = lambda x: x * 3  # shadows the class-wide entry: the guard sees it
    x = torch.randn(3)
    assert_same(compiled(x), x * 3)
    assert_graph_count(backend, 2, "after the local override")


def test_in_on_a_registry_after_a_pending_side_effect_stays_in_the_graph(backend):
    def fn(x):
        STATE.flag = True
        return x * 2 if "double" in FUNCTIONS else x

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1, breaks=0)


def test_environment_lookup_is_guarded(backend, monkeypatch):
    def fn(x):
        return x * 2 if os.environ.get("TORCHKILN_TEST_DOUBLE") == "1" else x * 3

    monkeypatch.setenv("TORCHKILN_TEST_DOUBLE", "1")
    compiled = check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1, breaks=0)
    monkeypatch.setenv("TORCHKILN_TEST_DOUBLE", "0")  # the guard re-reads it: a recompile
    x = torch.randn(3)
    assert_same(compiled(x), x * 3)
    assert_graph_count(backend, 2, "after the variable changed")


def apply_chunked(forward_fn, *tensors):
    """Like transformers' ``apply_chunking_to_forward``: checks the callable's arity."""
    if len(inspect.signature(forward_fn).parameters) != len(tensors):
        raise ValueError("wrong number of tensors")
    return forward_fn(*tensors)


class Chunked(torch.nn.Module):
    def forward(self, x):
        return apply_chunked(self.chunk, x)

    def chunk(self, x):
        return x.sin()


def test_signature_of_a_bound_method_is_a_constant(backend):
    check_compiled(Chunked(), lambda: (torch.randn(3),), backend=backend, graphs=1)


def one(x):
    return x + 1


def two(x, y):
    return x * y


def test_signature_of_a_function_is_guarded_by_its_identity(backend):
    def fn(f, x):
        params = inspect.signature(f).parameters
        return f(*[x] * len(params)), list(params)

    compiled = check_compiled(fn, lambda: (one, torch.randn(3)), backend=backend, graphs=1)
    x = torch.randn(3)
    assert_same(compiled(two, x), fn(two, x))
    assert_graph_count(backend, 2, "with a function of another arity")


def test_signature_parameters_cannot_be_written():
    def fn(x):
        inspect.signature(one).parameters["y"] = None
        return x

    with pytest.raises(TypeError):
        torchkiln.compile(fn, backend="eager")(torch.randn(2))
    assert graph_break_count() >= 1


class Rotary(torch.nn.Module):
    """Like transformers' rotary embedding: ``forward`` decorated with ``@torch.no_grad()``."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(3))

    @torch.no_grad()
    def forward(self, x):
        return x * self.scale


class WithRotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Rotary()
        self.weight = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return self.rotary(x) + x * self.weight


def test_no_grad_decorated_forward_of_a_submodule_stays_in_the_graph(backend):
    model = WithRotary()
    check_compiled(model, lambda: (torch.randn(3),), backend=backend, graphs=1, grads=True)
    out = torchkiln.compile(model.rotary, backend=backend)(torch.randn(3))
    assert not out.requires_grad


def test_class_of_a_grad_mode_object_is_its_real_class(backend):
    def fn(x):
        with torch.no_grad():
            pass
        return x * isinstance(torch.no_grad(), torch.no_grad)

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)
