"""compile(): argument checks before capture, backend errors, Module wrapping."""

from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln import registry
from torchkiln.api import CompiledModule, GraphCompiler, resolve_backend
from torchkiln.exc import (
    BackendCompilerFailed,
    InvalidOptionError,
    NotImplementedYet,
    UnknownBackendError,
)
from torchkiln.plugin import Backend, Option


def noop_backend(gm, example_inputs, **options):
    return gm.forward


@pytest.fixture
def optioned_backend(monkeypatch):
    """A registered backend with an option schema and one mode."""
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    seen = []

    def compile_fn(gm, example_inputs, **options):
        seen.append(options)
        return gm.forward

    torchkiln.register_backend(
        Backend(
            "optioned",
            compile_fn,
            options=(
                Option("cpp.threads", 0, "threads", type=int),
                Option("trace.enabled", False, "write debug files", type=bool),
                Option("future_feature", False, "not built yet", implemented=False),
            ),
            modes={"max-autotune": {"cpp.threads": 2}},
        )
    )
    return seen


def traced_add_one():
    return torch.fx.symbolic_trace(lambda x: x + 1)


def test_unknown_backend_fails_at_compile_time_with_closest_match():
    with pytest.raises(UnknownBackendError, match="Did you mean 'onnxrt'"):
        torchkiln.compile(lambda x: x, backend="onnxrtt")


def test_unknown_backend_fails_in_decorator_form_before_decorating():
    with pytest.raises(UnknownBackendError):
        torchkiln.compile(backend="no_such_backend")


def test_mode_and_options_together_is_an_error():
    with pytest.raises(InvalidOptionError, match="Either mode or options"):
        torchkiln.compile(lambda x: x, backend="eager", mode="max-autotune", options={"a": 1})


def test_unknown_mode_lists_the_modes():
    with pytest.raises(InvalidOptionError) as info:
        torchkiln.compile(lambda x: x, backend="eager", mode="turbo")
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert mode in str(info.value)


def test_mode_the_backend_does_not_declare_is_an_error():
    with pytest.raises(InvalidOptionError, match="'eager' does not support mode 'max-autotune'"):
        torchkiln.compile(lambda x: x, backend="eager", mode="max-autotune")


def test_default_mode_is_accepted_by_every_backend():
    assert resolve_backend("eager", "default", None).options == {}


def test_mode_maps_to_the_backends_options(optioned_backend):
    assert resolve_backend("optioned", "max-autotune", None).options == {"cpp.threads": 2}


def test_unknown_option_names_the_closest_valid_key(optioned_backend):
    with pytest.raises(InvalidOptionError, match="Did you mean 'cpp.threads'"):
        torchkiln.compile(lambda x: x, backend="optioned", options={"cpp.thread": 4})


def test_option_of_wrong_type_is_an_error(optioned_backend):
    with pytest.raises(InvalidOptionError, match="'cpp.threads'.*expects int, got str"):
        torchkiln.compile(lambda x: x, backend="optioned", options={"cpp.threads": "4"})


def test_declared_but_unimplemented_option_says_so(optioned_backend):
    with pytest.raises(NotImplementedYet, match="'future_feature'.*not implemented yet"):
        torchkiln.compile(lambda x: x, backend="optioned", options={"future_feature": True})


def test_options_to_a_backend_without_schema_is_an_error():
    with pytest.raises(InvalidOptionError, match="'eager' takes no options"):
        torchkiln.compile(lambda x: x, backend="eager", options={"anything": 1})


def test_valid_options_reach_the_compile_function(optioned_backend):
    compiler = resolve_backend("optioned", None, {"cpp.threads": 3})
    compiler(traced_add_one(), [torch.randn(2)])
    assert optioned_backend == [{"cpp.threads": 3}]


def test_disable_returns_the_original_callable():
    def fn(x):
        return x

    assert torchkiln.compile(fn, disable=True) is fn
    assert torchkiln.compile(disable=True)(fn) is fn


def test_callable_backend_is_used_as_compile_function():
    assert resolve_backend(noop_backend, None, None).compile_fn is noop_backend


def test_object_with_compile_method_is_a_backend():
    class Compiler:
        def compile(self, gm, example_inputs):
            return gm.forward

    compiler = Compiler()
    assert resolve_backend(compiler, None, None).compile_fn == compiler.compile


def test_backend_that_is_neither_name_nor_callable_is_an_error():
    with pytest.raises(TypeError, match="backend must be a registered name"):
        torchkiln.compile(lambda x: x, backend=42)


def exploding_backend(gm, example_inputs):
    raise ValueError("kernel generation failed")


def test_backend_error_names_backend_and_graph_and_keeps_traceback():
    compiler = GraphCompiler("exploding", exploding_backend)
    with pytest.raises(BackendCompilerFailed) as info:
        compiler(traced_add_one(), [torch.randn(2)])
    message = str(info.value)
    assert "backend 'exploding' raised ValueError: kernel generation failed" in message
    assert "add" in message  # the graph's text
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.__cause__.__traceback__ is not None


def test_suppress_errors_falls_back_to_running_the_graph(monkeypatch, caplog):
    monkeypatch.setattr(torchkiln.config, "suppress_errors", True)
    compiled = GraphCompiler("exploding", exploding_backend)(traced_add_one(), [torch.randn(2)])
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    assert "backend 'exploding' failed" in caplog.text


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.ones(3))
        self.label = "two-layer"

    def forward(self, x):
        return self.fc(x) * self.scale


def test_compiled_module_shares_parameters_buffers_and_state_dict_keys():
    model = TwoLayer()
    wrapper = CompiledModule(model, lambda forward: forward)
    assert list(wrapper.state_dict()) == list(model.state_dict())
    assert all(a is b for a, b in zip(wrapper.parameters(), model.parameters(), strict=True))
    assert wrapper.scale is model.scale
    wrapper.load_state_dict({k: torch.zeros_like(v) for k, v in model.state_dict().items()})
    assert torch.count_nonzero(model.fc.weight) == 0


def test_compiled_module_forwards_attribute_access_and_train_flag():
    model = TwoLayer()
    wrapper = CompiledModule(model, lambda forward: forward)
    assert wrapper.label == "two-layer"
    assert wrapper.fc is model.fc
    wrapper.eval()
    assert not model.training and not model.fc.training and not wrapper.training


def test_compiled_module_calls_the_compiled_forward():
    model = TwoLayer()
    calls = []

    def compiled_forward(x):
        calls.append(x)
        return model.forward(x)

    x = torch.randn(2, 4)
    wrapper = CompiledModule(model, lambda forward: compiled_forward)
    torch.testing.assert_close(wrapper(x), model(x))
    assert len(calls) == 1


@pytest.fixture
def preparing_backend(monkeypatch):
    """A registered backend whose ``prepare`` records the devices it is given and whether a
    graph had been compiled by then."""
    registry._registry._discover()
    monkeypatch.setattr(registry._registry, "_backends", dict(registry._registry._backends))
    calls, compiled = [], []

    def compile_fn(gm, example_inputs):
        compiled.append(gm)
        return gm.forward

    def prepare(devices):
        calls.append((devices, len(compiled)))

    torchkiln.register_backend(Backend("preparing", compile_fn, prepare=prepare))
    return calls


def test_prepare_runs_as_each_capture_begins_with_the_arguments_devices(preparing_backend):
    compiled = torchkiln.compile(lambda x, n: x * n, backend="preparing")
    compiled(torch.randn(3), 2)
    assert preparing_backend == [({torch.device("cpu")}, 0)]  # before the graph compiled
    compiled(torch.randn(3), 2)  # a cache hit captures nothing
    assert len(preparing_backend) == 1
    compiled(torch.randn(3), 3)  # a recompile captures again
    assert [devices for devices, _ in preparing_backend] == [{torch.device("cpu")}] * 2


def test_prepare_of_a_chain_calls_each_backend_that_has_one(preparing_backend):
    compiled = torchkiln.compile(lambda x: x + 1, backend=["preparing"])
    compiled(torch.randn(2))
    assert preparing_backend == [({torch.device("cpu")}, 0)]
