"""The runtime-wrapper seam: a plugin's wrapper applied around any backend by a mode or option."""

from __future__ import annotations

import logging

import pytest
import torch

import torchkiln
from torchkiln import registry
from torchkiln.api import resolve_backend
from torchkiln.exc import InvalidOptionError, UnknownBackendError
from torchkiln.plugin import Backend, Option, RuntimeWrapper, hookimpl


class Recorder:
    """A wrapper's per-model state: which graphs it wrapped and how often they ran."""

    made: list[Recorder] = []

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.calls: list[str] = []
        Recorder.made.append(self)

    def __call__(self, fn, kind):
        self.kinds.append(kind)

        def wrapped(*args):
            self.calls.append(kind)
            return fn(*args)

        return wrapped


class TestWrapperPlugin:
    """A plugin providing a wrapper through the hook, as a third-party package would."""

    @hookimpl
    def torchkiln_runtime_wrappers(self):
        return [RuntimeWrapper("recorder", Recorder, "records what it wraps")]


PLUGIN = TestWrapperPlugin()


@pytest.fixture
def wrappers(monkeypatch):
    """The test plugin registered, and its wrapper standing in for CUDA graphs."""
    torchkiln.reset()  # compile calls with equal settings share captures and wrapper state
    reg = registry._registry
    reg._discover()
    monkeypatch.setattr(reg, "_backends", dict(reg._backends))
    monkeypatch.setattr(reg, "_wrappers", dict(reg._wrappers))
    reg._register_plugin("test-wrapper-plugin", lambda: PLUGIN)
    if "recorder" not in reg._wrappers:  # registered once per process by pluggy
        reg._add_wrapper(PLUGIN.torchkiln_runtime_wrappers()[0], "test-wrapper-plugin")
    registry.register_runtime_wrapper(
        RuntimeWrapper("cudagraphs", Recorder, modes=("reduce-overhead",)), override=True
    )
    Recorder.made.clear()
    return Recorder.made


def f(x, w):
    return (x @ w).relu() + 1


def test_hook_registers_the_plugins_wrapper(wrappers):
    assert registry.lookup_runtime_wrapper("recorder").description == "records what it wraps"


def test_unknown_wrapper_names_the_registered_ones(wrappers):
    with pytest.raises(UnknownBackendError, match="unknown runtime wrapper 'nope'.*recorder"):
        registry.lookup_runtime_wrapper("nope")


def test_mode_wraps_the_whole_callable_of_a_backend_without_aot(wrappers):
    compiled = torchkiln.compile(f, backend="eager", mode="reduce-overhead")
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), f(x, w))
        compiled(torch.randn(3, 4), w)
    (state,) = wrappers
    assert state.kinds == ["graph"] and state.calls == ["graph", "graph"]


def test_training_call_of_a_backend_without_aot_runs_unwrapped_and_says_why(wrappers, caplog):
    compiled = torchkiln.compile(f, backend="eager", mode="reduce-overhead")
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        compiled(x, w).sum().backward()
        compiled(x, w).sum().backward()
    w_ref = w.detach().clone().requires_grad_()
    f(x, w_ref).sum().backward()
    torch.testing.assert_close(w.grad, 2 * w_ref.grad)
    assert wrappers[0].calls == []
    assert caplog.text.count("does not use torchkiln.aot") == 1


def test_mode_wraps_forward_and_backward_of_aot_eager(wrappers):
    compiled = torchkiln.compile(f, backend="aot_eager", mode="reduce-overhead")
    x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    out = compiled(x, w)
    out.sum().backward()
    expected = f(x, w_ref)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w.grad, w_ref.grad)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), f(x, w))
    (state,) = wrappers
    assert state.kinds == ["forward", "backward", "inference"]
    assert state.calls == ["forward", "backward", "inference"]


def test_all_graphs_of_a_compiled_model_share_one_wrapper_state(wrappers):
    def with_break(x):
        y = x.sin()
        print("graph break")
        return y.cos()

    compiled = torchkiln.compile(with_break, backend="aot_eager", mode="reduce-overhead")
    x = torch.randn(4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), with_break(x))
    (state,) = wrappers
    assert state.kinds == ["inference", "inference"]


def test_inductor_reduce_overhead_applies_the_wrapper_through_its_option(wrappers):
    compiled = torchkiln.compile(lambda x: x.sin() + 1, backend="inductor", mode="reduce-overhead")
    x = torch.randn(8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), x.sin() + 1)
    (state,) = wrappers
    assert state.calls == ["inference"]


def test_inductor_cudagraphs_option_turns_the_wrapper_on(wrappers):
    compiler = resolve_backend("inductor", None, {"triton.cudagraphs": True})
    assert compiler.runtime_wrappers == ("cudagraphs",)
    assert "triton.cudagraphs" not in compiler.options
    assert resolve_backend("inductor", None, {"triton.cudagraphs": False}).runtime_wrappers == ()


def test_inductor_max_autotune_mode_tunes_under_the_cudagraphs_wrapper(wrappers):
    compiler = resolve_backend("inductor", "max-autotune", None)
    assert compiler.runtime_wrappers == ("cudagraphs",)
    assert compiler.options == {"max_autotune": True}
    no_graphs = resolve_backend("inductor", "max-autotune-no-cudagraphs", None)
    assert no_graphs.runtime_wrappers == () and no_graphs.options == {"max_autotune": True}


def test_callable_backend_gets_the_modes_wrapper(wrappers):
    def my_backend(gm, example_inputs):
        return gm.forward

    compiled = torchkiln.compile(f, backend=my_backend, mode="reduce-overhead")
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), f(x, w))
    assert wrappers[0].calls == ["graph"]


def test_option_with_a_runtime_wrapper_applies_it_and_is_not_passed_on(wrappers):
    seen = []

    def compile_fn(gm, example_inputs, **options):
        seen.append(options)
        return gm.forward

    torchkiln.register_backend(
        Backend(
            "wrapped_by_option",
            compile_fn,
            options=(
                Option("record", True, "use the recorder", bool, runtime_wrapper="recorder"),
                Option("level", 0, "a plain option", int),
            ),
        )
    )
    compiler = resolve_backend("wrapped_by_option", None, None)
    assert compiler.runtime_wrappers == ("recorder",)
    compiled = torchkiln.compile(
        f, backend="wrapped_by_option", options={"record": True, "level": 2}
    )
    with torch.no_grad():
        compiled(torch.randn(3, 4), torch.randn(4, 2))
    assert seen == [{"level": 2}]
    assert wrappers[0].calls == ["graph"]
    assert resolve_backend("wrapped_by_option", None, {"record": False}).runtime_wrappers == ()


def test_option_naming_a_missing_wrapper_fails_at_compile_time(wrappers):
    torchkiln.register_backend(
        Backend(
            "wants_missing",
            lambda gm, ex: gm.forward,
            options=(Option("x", True, "needs a plugin", bool, runtime_wrapper="missing"),),
        )
    )
    with pytest.raises(UnknownBackendError, match="unknown runtime wrapper 'missing'"):
        torchkiln.compile(f, backend="wants_missing")


def test_mode_no_wrapper_stands_for_lists_what_the_backend_supports(wrappers):
    with pytest.raises(InvalidOptionError, match="'eager' does not support mode 'max-autotune'"):
        torchkiln.compile(f, backend="eager", mode="max-autotune")


def test_cache_key_tells_wrapped_from_plain(wrappers):
    plain = resolve_backend("aot_eager", None, None)
    wrapped = resolve_backend("aot_eager", "reduce-overhead", None)
    assert plain.cache_key() != wrapped.cache_key()
    assert wrapped.runtime_wrappers == ("cudagraphs",)
