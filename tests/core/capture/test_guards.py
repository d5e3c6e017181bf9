"""Guards: generated once per entry as straight-line Python, cheapest first, sound."""

import logging

import pytest
import torch

import torchkiln
from kiln_testing import RecordingBackend, kiln_logs
from torchkiln.capture.dispatch import _caches


def entries_of(fn):
    return _caches[fn.__code__].all_entries()


def add_one(x):
    return x + 1


def test_guard_function_is_a_single_return_expression(backend):
    torchkiln.compile(add_one, backend=backend)(torch.randn(2))
    source = entries_of(add_one)[0].guard_source
    guard_def = source.split("def ___first_failure")[0]
    body = [line.strip() for line in guard_def.splitlines()[1:] if line.strip()]
    assert body[0] == "return ("
    assert not any(line.startswith(("if ", "for ", "while ")) for line in body)


def test_type_checks_come_before_tensor_metadata_checks(backend):
    torchkiln.compile(add_one, backend=backend)(torch.randn(2))
    descriptions = entries_of(add_one)[0].guard_descriptions
    type_at = next(i for i, d in enumerate(descriptions) if d.startswith("type("))
    size_at = next(i for i, d in enumerate(descriptions) if ".size()" in d)
    assert type_at < size_at


def test_first_failure_names_the_guard_that_failed(backend):
    compiled = torchkiln.compile(add_one, backend=backend)
    compiled(torch.randn(2))
    entry = entries_of(add_one)[0]
    assert "size()" in entry.first_failure(add_one, torch.randn(3))
    assert "dtype" in entry.first_failure(add_one, torch.randn(2, dtype=torch.float64))
    assert entry.first_failure(add_one, torch.randn(2)) is None


def test_recompiles_log_names_the_failing_guard_and_the_function(backend, caplog):
    compiled = torchkiln.compile(add_one, backend=backend)
    compiled(torch.randn(2))
    with kiln_logs("recompiles"), caplog.at_level(logging.INFO, logger="torchkiln"):
        compiled(torch.randn(5))
    messages = [
        r.getMessage() for r in caplog.records if getattr(r, "artifact", "") == "recompiles"
    ]
    assert len(messages) == 1
    assert "add_one" in messages[0] and "size()" in messages[0] and __file__ in messages[0]


def test_a_transposed_input_recompiles_when_strides_are_guarded(backend):
    compiled = torchkiln.compile(add_one, backend=backend)
    x = torch.randn(3, 3)
    compiled(x)
    compiled(x.t())
    assert torchkiln.counters["recompiles"]["total"] == 1


def test_strides_are_not_guarded_when_config_says_so(backend, monkeypatch):
    monkeypatch.setattr(torchkiln.config, "guard_strides", False)
    compiled = torchkiln.compile(add_one, backend=backend)
    x = torch.randn(3, 3)
    compiled(x)
    torch.testing.assert_close(compiled(x.t()), x.t() + 1)
    assert backend.graph_count == 1


def test_global_shadowing_a_builtin_recompiles(backend):
    namespace = {}
    exec("def uses_len(x):\n    return x * len([1, 2])\n", namespace)
    uses_len = namespace["uses_len"]
    compiled = torchkiln.compile(uses_len, backend=backend)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), x * 2)
    namespace["len"] = lambda seq: 10
    torch.testing.assert_close(compiled(x), x * 10)


def test_default_dtype_change_recompiles(backend):
    def make(x):
        return x + torch.ones(2)

    compiled = torchkiln.compile(make, backend=backend)
    compiled(torch.ones(2))
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = compiled(torch.ones(2))
    finally:
        torch.set_default_dtype(previous)
    assert out.dtype == torch.float64
    assert backend.graph_count == 2


def test_aliased_arguments_are_guarded_as_aliases():
    def both(a, b):
        a.add_(1)
        return b * 2

    backend = RecordingBackend()
    compiled = torchkiln.compile(both, backend=backend)
    x = torch.zeros(2)
    torch.testing.assert_close(compiled(x, x), torch.full((2,), 2.0))
    y, z = torch.zeros(2), torch.zeros(2)
    torch.testing.assert_close(compiled(y, z), torch.zeros(2))
    assert backend.graph_count == 2


@pytest.mark.parametrize("value", [True, 1, 1.0])
def test_constants_equal_in_python_but_of_other_types_recompile(backend, value):
    def scale(x, k):
        return x * k

    compiled = torchkiln.compile(scale, backend=backend)
    compiled(torch.ones(1), 2)
    out = compiled(torch.ones(1), value)
    torch.testing.assert_close(out, torch.ones(1) * value)
    assert backend.graph_count == 2


def test_identity_comparison_of_two_objects_is_guarded(backend):
    class Config:
        pass

    def fn(x, a, b):
        return x + 1 if a is b else x - 1

    compiled = torchkiln.compile(fn, backend=backend)
    one, other = Config(), Config()
    x = torch.zeros(1)
    torch.testing.assert_close(compiled(x, one, one), x + 1)
    torch.testing.assert_close(compiled(x, one, other), x - 1)
    assert backend.graph_count == 2


def test_enum_argument_is_guarded_by_identity(backend):
    import enum

    class Mode(enum.Enum):
        ADD = 1
        SUB = 2

    def fn(x, mode):
        return x + 1 if mode is Mode.ADD else x - 1

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.zeros(1)
    torch.testing.assert_close(compiled(x, Mode.ADD), x + 1)
    torch.testing.assert_close(compiled(x, Mode.SUB), x - 1)
    assert backend.graph_count == 2


def test_nan_constant_argument_hits_the_cache(backend):
    compiled = torchkiln.compile(lambda x, s: x * s, backend=backend)
    compiled(torch.ones(1), float("nan"))
    compiled(torch.ones(1), float("nan"))
    assert backend.graph_count == 1


def test_long_sources_are_read_once_per_guard_call(backend):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    compiled = torchkiln.compile(model, backend=backend)
    compiled(torch.randn(1, 2))
    (entry,) = [e for cache in _caches.values() for e in cache.all_entries()]
    guard_text = entry.guard_source.split("def ___first_failure")[1]  # every check in Python
    assert guard_text.count("L_self._modules['0']") == 1
    assert guard_text.count("['weight']") == 2  # one read per layer


def test_hoisted_guards_pass_on_the_next_call_and_fail_on_a_new_parameter(backend):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    compiled = torchkiln.compile(model, backend=backend)
    x = torch.randn(1, 2)
    compiled(x)
    compiled(x)
    assert backend.graph_count == 1
    model[0].weight = torch.nn.Parameter(torch.randn(2, 2, dtype=torch.float64))
    model[0].bias = torch.nn.Parameter(torch.randn(2, dtype=torch.float64))
    torch.testing.assert_close(compiled(x.double()), model(x.double()))
    assert backend.graph_count == 2


def test_hoisting_leaves_string_constants_alone():
    from torchkiln.capture.guards import GuardSet

    guards = GuardSet({})
    guards.constant("L_self.mode", "L_self.mode")
    guards.constant("L_self.other", "x")
    text = "\n".join(guards.hoisted_exprs())
    assert "== 'L_self.mode'" in text  # the literal is not rewritten into a name
    assert text.count("(___h0 := L_self.mode)") == 1
    source = guards.source("L_self")
    namespace = dict(guards.ns)
    exec(source, namespace)

    class Obj:
        mode, other = "L_self.mode", "x"

    assert namespace["___guard"](Obj())
    Obj.other = "y"
    assert not namespace["___guard"](Obj())


def test_deep_module_guards_read_each_submodule_once(backend):
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(200)])
    compiled = torchkiln.compile(model, backend=backend)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    (entry,) = [e for cache in _caches.values() for e in cache.all_entries()]
    guard_text = entry.guard_source.split("def ___first_failure")[1]  # every check in Python
    for i in (0, 117, 199):
        assert guard_text.count(f"L_self._modules['{i}']") == 1


def test_sparse_inputs_run_eagerly_and_dense_ones_compile(backend):
    """A sparse tensor has no storage for the capture's aliasing checks (it crashed)."""
    compiled = torchkiln.compile(lambda x, w: x @ w + 1, backend=backend)
    w = torch.randn(4, 5)
    for x in (torch.randn(3, 4).to_sparse(), torch.randn(3, 4), torch.randn(3, 4).to_sparse()):
        torch.testing.assert_close(compiled(x, w), x @ w + 1)
    assert torchkiln.counters["eager_fallback"]["a sparse_coo tensor"] >= 1
