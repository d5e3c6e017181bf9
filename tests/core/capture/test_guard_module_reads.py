"""Guards read a model's layers cheaply: module state from each layer's ``__dict__``
(where its class makes that the same read) and class members once per class. Each
change those guards cover still recompiles, gives eager's result, and is named as the
reason."""

import logging

import pytest
import torch
import torch.nn as nn

import torchkiln
from kiln_testing import kiln_logs
from torchkiln.capture.dispatch import _caches


def layer_class():
    """A fresh class per test (tests patch it): a layer using a helper of its base class."""

    class Base(nn.Module):
        def helper(self, x):
            return x * self.scale

    class Shift(Base):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4))
            self.scale = 2.0

        def forward(self, x):
            return self.helper(x * self.w)

    return Shift


def recompile_reason(model, change, backend, caplog) -> str:
    """Compile, call, apply ``change``, call again: one recompile, eager's result; its reason."""
    x = torch.randn(2, 4)
    compiled = torchkiln.compile(model, backend=backend)
    compiled(x)
    change(model)
    with kiln_logs("recompiles"), caplog.at_level(logging.INFO, logger="torchkiln"):
        torch.testing.assert_close(compiled(x), model(x))
    messages = [
        r.getMessage() for r in caplog.records if getattr(r, "artifact", "") == "recompiles"
    ]
    assert len(messages) == 1
    return messages[0]


def two_layers():
    """Two instances of one class: their state is read from their ``__dict__``."""
    shift = layer_class()
    return nn.Sequential(shift(), shift())


def test_a_model_of_repeated_layers_reads_their_state_from_their_dicts(backend):
    model = two_layers()
    torchkiln.compile(model, backend=backend)(torch.randn(2, 4))
    (entry,) = [e for cache in _caches.values() for e in cache.all_entries()]
    guard_text = entry.guard_source.split("def ___first_failure")[1]  # every check in Python
    assert "['training']" in guard_text and "['scale']" in guard_text
    assert "Shift defines none of" in "\n".join(entry.guard_descriptions)


def set_data(value):
    """Give the second layer's parameter other data (``value`` of its data)."""
    return lambda model: setattr(model[1].w, "data", value(model[1].w.data))


@pytest.mark.parametrize(
    "change, named",
    [
        (set_data(lambda w: torch.randn(1)), "_parameters['w'].size()"),
        (set_data(lambda w: torch.randn(4, 2)[:, 0]), "_parameters['w'].stride()"),
        (set_data(lambda w: w.double()), "_parameters['w'].dtype"),
        (lambda model: model[1].w.requires_grad_(False), "_parameters['w'].requires_grad"),
        (lambda model: model[1].eval(), "_modules['1'].training"),
        (lambda model: setattr(model[1], "scale", 3.0), "_modules['1'].scale == 2.0"),
    ],
    ids=["shape", "stride", "dtype", "requires_grad", "training", "attribute"],
)
def test_a_changed_layer_recompiles_naming_what_changed(backend, caplog, change, named):
    reason = recompile_reason(two_layers(), change, backend, caplog)
    assert named in reason
    assert backend.graph_count == 2


def test_a_hook_on_one_layer_is_the_reason_for_recompiling(backend, caplog):
    hook = lambda module, args, out: out + 1  # noqa: E731
    reason = recompile_reason(
        two_layers(), lambda model: model[1].register_forward_hook(hook), backend, caplog
    )
    assert "_modules['1'] has no forward or backward hooks" in reason


# The properties below give what the instance dicts hold (every layer's scale is 2.0), so
# that eager's result is the same: what is tested is that the guards see the class change
# and recompile.


def test_a_property_added_to_the_layer_class_is_seen(backend, caplog):
    model = two_layers()
    shift = type(model[0])
    same = property(lambda self: 2.0)
    reason = recompile_reason(model, lambda m: setattr(shift, "scale", same), backend, caplog)
    assert "Shift defines none of" in reason


def test_a_getattribute_added_to_a_base_class_is_seen(backend, caplog):
    model = two_layers()
    base = type(model[0]).__mro__[1]

    def getattribute(self, name):
        return nn.Module.__getattribute__(self, name)

    reason = recompile_reason(
        model, lambda m: setattr(base, "__getattribute__", getattribute), backend, caplog
    )
    assert "Base defines none of" in reason


def test_new_bases_for_the_layer_class_are_seen(backend, caplog):
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return x * self.scale

    class Scaled(nn.Module):
        scale = property(lambda self: 2.0)

    reason = recompile_reason(
        nn.Sequential(Plain(), Plain()),
        lambda m: setattr(Plain, "__bases__", (Scaled,)),
        backend,
        caplog,
    )
    assert "the bases of" in reason and "Plain are unchanged" in reason


# The replaced methods are held: an entry whose method dies is dropped, not recompiled.


def test_a_method_patched_on_the_layer_class_recompiles(backend, caplog):
    model = two_layers()
    shift = type(model[0])
    original = shift.forward
    reason = recompile_reason(
        model, lambda m: setattr(shift, "forward", lambda self, x: x - 1), backend, caplog
    )
    assert "Shift.__dict__['forward'] is the same" in reason
    assert original is not shift.forward


def test_a_method_patched_on_a_base_class_recompiles(backend, caplog):
    model = two_layers()
    base = type(model[0]).__mro__[1]
    original = base.helper
    reason = recompile_reason(
        model, lambda m: setattr(base, "helper", lambda self, x: x * 5), backend, caplog
    )
    assert "Base.__dict__['helper'] is the same" in reason
    assert original is not base.helper


def test_a_method_shadowing_the_base_class_one_recompiles(backend, caplog):
    model = two_layers()
    shift = type(model[0])
    reason = recompile_reason(
        model, lambda m: setattr(shift, "helper", lambda self, x: x * 5), backend, caplog
    )
    assert "Shift has no 'helper'" in reason


class Layer(nn.Module):
    """At module level: a capture that reads it can be stored (its class is importable)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.scale = 2.0

    def forward(self, x):
        return x * self.w * self.scale


def test_a_stored_capture_loads_with_the_class_checks_it_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torchkiln.config, "persist_captures", True)
    model, x = nn.Sequential(Layer(), Layer()), torch.randn(2, 4)
    torchkiln.compile(model, backend="eager")(x)
    assert torchkiln.counters["capture_cache"]["stores"] == 1
    torchkiln.reset()
    compiled = torchkiln.compile(model, backend="eager")
    compiled(x)
    assert dict(torchkiln.counters["capture_cache"]) == {"hits": 1}
    same = property(lambda self: 2.0)
    monkeypatch.setattr(Layer, "scale", same, raising=False)
    torch.testing.assert_close(compiled(x), model(x))
    assert torchkiln.counters["recompiles"]["total"] == 1


@pytest.mark.parametrize("layers", [1, 2], ids=["one layer", "two layers"])
def test_a_property_shadowing_an_instance_attribute_wins_as_in_eager(backend, layers):
    """Python reads a class's data descriptor before the instance's ``__dict__``: a
    property added to the class after the first call is what the recompile must read."""
    shift = layer_class()
    model = nn.Sequential(*(shift() for _ in range(layers)))
    x = torch.randn(2, 4)
    compiled = torchkiln.compile(model, backend=backend)
    torch.testing.assert_close(compiled(x), model(x))
    shift.scale = property(lambda self: 3.0)
    torch.testing.assert_close(compiled(x), model(x))
