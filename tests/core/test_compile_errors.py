"""Bad arguments fail at ``compile()`` time, in one line naming the problem and the fix."""

from __future__ import annotations

import logging

import pytest
import torch

import torchkiln
from torchkiln import config, registry
from torchkiln.exc import BackendCompilerFailed, InvalidOptionError
from torchkiln.plugin import Backend, Option


def add_sin(x):
    return x.sin() + 1


def compile_error(**kwargs) -> str:
    """The message ``compile()`` itself raises (nothing is captured or called)."""
    with pytest.raises(InvalidOptionError) as info:
        torchkiln.compile(add_sin, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("options", [[("cpp.threads", 2)], "cpp.threads", 4])
def test_options_that_are_not_a_mapping(options):
    message = compile_error(options=options)
    assert message.startswith(
        "options for backend 'inductor' must be a mapping of option name to value, "
        "e.g. options={'name': value}; got "
    )


def test_options_of_a_callable_backend_must_be_a_mapping_too():
    def my_backend(gm, example_inputs, **options):
        return gm.forward

    message = compile_error(backend=my_backend, options=[("a", 1)])
    assert "options for backend 'my_backend' must be a mapping" in message


def test_option_names_must_be_strings():
    message = compile_error(options={3: 1})
    assert message == "option names of backend 'inductor' are strings; got int 3 in options"


def test_value_outside_its_choices_lists_them():
    message = compile_error(options={"cpp.opt_level": "fast"})
    assert message == (
        "option 'cpp.opt_level' of backend 'inductor' must be one of "
        "'O0', 'O1', 'O2', 'O3', got 'fast'."
    )


def test_value_outside_its_choices_suggests_the_closest():
    message = compile_error(options={"cpp.opt_level": "o3"})
    assert message.endswith("got 'o3'. Did you mean 'O3'?")


def test_bool_is_not_an_int():
    message = compile_error(options={"cpp.threads": True})
    assert message == (
        "option 'cpp.threads' of backend 'inductor' expects int or None, got bool (True); "
        "pass int or None (the default is None)"
    )


@pytest.mark.parametrize("key", ["cpp.threads", "cpp.simdlen"])
def test_count_below_its_minimum(key):
    message = compile_error(options={key: 0})
    assert message == f"option {key!r} of backend 'inductor' must be >= 1, got 0"


def test_unknown_cpu_backend():
    message = compile_error(options={"cpu_backend": "gcc"})
    assert "option 'cpu_backend' of backend 'inductor' must be one of 'cpp', 'triton'" in message


def test_unknown_mode_suggests_the_closest():
    message = compile_error(mode="reduce_overhead")
    assert message.startswith("unknown mode 'reduce_overhead'. Did you mean 'reduce-overhead'?")


def test_any_backend_schema_is_checked_by_the_core(monkeypatch):
    """Choices and minimums are the core's job: a third-party backend only declares them."""
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    torchkiln.register_backend(
        Backend(
            "picky",
            lambda gm, example_inputs, **options: gm.forward,
            options=(
                Option("level", "fast", "how hard", type=str, choices=("fast", "small")),
                Option("workers", 1, "how many", type=int, minimum=1),
            ),
        )
    )
    assert "must be one of 'fast', 'small', got 'tiny'" in compile_error(
        backend="picky", options={"level": "tiny"}
    )
    assert "option 'workers' of backend 'picky' must be >= 1, got -2" in compile_error(
        backend="picky", options={"workers": -2}
    )


def returns_a_number(gm, example_inputs):
    return 3


def test_backend_returning_a_non_callable_is_named():
    compiled = torchkiln.compile(add_sin, backend=returns_a_number)
    with pytest.raises(BackendCompilerFailed) as info:
        compiled(torch.randn(4))
    first_line = str(info.value).splitlines()[0]
    assert first_line == (
        "backend 'returns_a_number' raised TypeError: its compile function returned int (3), "
        "not a callable; a backend must return the compiled graph as a callable "
        "(gm.forward runs it as it is)"
    )


def test_backend_returning_a_non_callable_falls_back_to_eager_when_suppressed(monkeypatch, caplog):
    monkeypatch.setattr(config, "suppress_errors", True)
    compiled = torchkiln.compile(add_sin, backend=returns_a_number)
    x = torch.randn(4)
    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        torch.testing.assert_close(compiled(x), add_sin(x))
    assert "backend 'returns_a_number' failed (TypeError: its compile function returned int" in (
        caplog.text
    )
