"""``torchkiln.config``: values are checked when assigned; ``cache_size_limit = 0`` runs eagerly."""

from __future__ import annotations

import pytest
import torch

import torchkiln
from kiln_testing import RecordingBackend
from torchkiln import config
from torchkiln.exc import RecompileLimitExceeded


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def scaled_sum(x, y):
    return (x * 2 + y).sum(0)


def test_cache_size_limit_zero_never_compiles(monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 0)
    backend = RecordingBackend()
    compiled = torchkiln.compile(scaled_sum, backend=backend)
    model = torch.nn.Linear(3, 2)
    compiled_model = torchkiln.compile(model, backend=backend)
    for _ in range(2):
        x, y = torch.randn(4, 3), torch.randn(4, 3)
        torch.testing.assert_close(compiled(x, y), scaled_sum(x, y))
        torch.testing.assert_close(compiled_model(x), model(x))
    assert backend.graph_count == 0
    assert torchkiln.counters["eager_fallback"]["cache_size_limit"] == 4


def test_cache_size_limit_zero_with_error_on_recompile_limit_raises(monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 0)
    monkeypatch.setattr(config, "error_on_recompile_limit", True)
    with pytest.raises(RecompileLimitExceeded, match="cache_size_limit=0; compiling is off"):
        torchkiln.compile(scaled_sum, backend="eager")(torch.ones(2), torch.ones(2))


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("cache_size_limit", "8", TypeError),
        ("cache_size_limit", 8.0, TypeError),
        ("cache_size_limit", True, TypeError),
        ("cache_size_limit", None, TypeError),
        ("cache_size_limit", -1, ValueError),
        ("suppress_errors", 1, TypeError),
        ("error_on_recompile_limit", "False", TypeError),
        ("guard_strides", None, TypeError),
        ("persist_captures", 0, TypeError),
    ],
)
def test_a_bad_value_raises_at_assignment_naming_the_setting(name, value, error):
    before = getattr(config, name)
    with pytest.raises(error, match=f"torchkiln.config.{name} must be"):
        setattr(config, name, value)
    assert getattr(config, name) is before


def test_an_unknown_setting_raises_naming_the_closest_one():
    with pytest.raises(AttributeError, match="Did you mean 'cache_size_limit'"):
        torchkiln.config.cach_size_limit = 4
    assert not hasattr(config, "cach_size_limit")


def test_valid_values_are_set_and_monkeypatch_restores_them():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(config, "cache_size_limit", 3)
        patch.setattr(config, "guard_strides", False)
        assert (config.cache_size_limit, config.guard_strides) == (3, False)
    assert (config.cache_size_limit, config.guard_strides) == (8, True)


@pytest.mark.parametrize(
    ("text", "expected"), [("0", False), ("off", False), ("False", False), ("1", True), ("", True)]
)
def test_persist_captures_environment_flag(monkeypatch, text, expected):
    monkeypatch.setenv("TORCHKILN_PERSIST_CAPTURES", text)
    assert config._env_flag("TORCHKILN_PERSIST_CAPTURES", True) is expected


def test_a_bad_environment_flag_raises(monkeypatch):
    monkeypatch.setenv("TORCHKILN_PERSIST_CAPTURES", "maybe")
    with pytest.raises(ValueError, match=r"\$TORCHKILN_PERSIST_CAPTURES must be 1 or 0"):
        config._env_flag("TORCHKILN_PERSIST_CAPTURES", True)
