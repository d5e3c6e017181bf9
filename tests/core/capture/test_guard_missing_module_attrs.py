"""A module traced without an attribute (``hasattr(self, name)`` false, as Hugging Face
layers check) is guarded by dict look-ups instead of a ``hasattr`` call, and each way the
attribute can appear still recompiles with eager's result, named as the reason."""

import logging

import pytest
import torch
import torch.nn as nn

import torchkiln
from kiln_testing import kiln_logs
from torchkiln.capture.dispatch import _caches


def optional_scale_class():
    """A fresh class per test (tests patch it): scales by ``self.scale`` where it has one
    (a submodule: by its result)."""

    class Optional(nn.Module):
        def forward(self, x):
            if hasattr(self, "scale"):
                scale = self.scale
                return scale(x) * 3 if isinstance(scale, nn.Module) else x * scale
            return x + 1

    return Optional


def layers(count: int = 2) -> nn.Sequential:
    cls = optional_scale_class()
    return nn.Sequential(*(cls() for _ in range(count)))


def guard_text() -> str:
    (entry,) = [e for cache in _caches.values() for e in cache.all_entries()]
    return entry.guard_source.split("def ___first_failure")[1]  # every check in Python


@pytest.mark.parametrize("count", [1, 2], ids=["one layer", "two layers"])
def test_a_missing_attribute_is_guarded_without_hasattr(backend, count):
    x = torch.randn(2, 3)
    model = layers(count)
    torch.testing.assert_close(torchkiln.compile(model, backend=backend)(x), model(x))
    text = guard_text()
    assert "hasattr(" not in text and "'scale' not in" in text, text


def add_class_attribute(model):
    type(model[1]).scale = 3.0


def patch_getattr(model):
    type(model[1]).__getattr__ = lambda self, name: 3.0 if name == "scale" else None


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda m: setattr(m[1], "scale", 3.0), "has no instance attribute 'scale'"),
        (lambda m: m[1].register_buffer("scale", torch.tensor(3.0)), "has no buffer 'scale'"),
        (lambda m: m[1].register_parameter("scale", nn.Parameter(torch.ones(()))), "parameter"),
        (lambda m: m[1].add_module("scale", nn.Identity()), "has no module 'scale'"),
        (add_class_attribute, "has no 'scale'"),
        (patch_getattr, "__getattr__"),
    ],
    ids=["instance", "buffer", "parameter", "submodule", "class attribute", "__getattr__"],
)
def test_an_attribute_that_appears_recompiles(backend, caplog, change, named):
    model, x = layers(2), torch.randn(2, 3)
    compiled = torchkiln.compile(model, backend=backend)
    compiled(x)
    change(model)
    with kiln_logs("recompiles"), caplog.at_level(logging.INFO, logger="torchkiln"):
        torch.testing.assert_close(compiled(x), model(x))
    reasons = [r.getMessage() for r in caplog.records if getattr(r, "artifact", "") == "recompiles"]
    assert len(reasons) == 1 and named in reasons[0], reasons
