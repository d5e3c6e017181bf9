"""The per-call paths trimmed for overhead (issue #18 item 4) decide and compute as before.

Each test compares with eager on fresh inputs and pins the trimmed path itself: the AOT
inference call under ``no_grad`` switches no grad mode, the transformed code reads a shared
module path once, the size guard still tells every shape apart, and the inductor wrapper
calls extern ops through their C op.
"""

from __future__ import annotations

import pytest
import torch

import torchkiln
from torchkiln.aot.api import _plan_key
from torchkiln.capture import dispatch


@pytest.fixture(autouse=True)
def _fresh():
    torchkiln.reset()
    yield
    torchkiln.reset()


def entries_of(fn):
    return dispatch.frame_cache(fn.__code__).all_entries()


def add_one(x):
    return x + 1


def scale(x, k):
    return x * k


def test_aot_inference_plans_and_grad_mode(monkeypatch):
    t, g = torch.randn(2), torch.randn(2, requires_grad=True)
    assert _plan_key((t, t), grad_enabled=False) == (None, ())
    assert _plan_key((t, 3, t, "a"), grad_enabled=False) == (None, (3, "a"))
    assert _plan_key((g, 3), grad_enabled=True) == ((True, False), (3,))
    assert _plan_key((g, 3), grad_enabled=False) == (None, (3,))
    assert _plan_key((t, 3), grad_enabled=True) == (None, (3,))
    compiled = torchkiln.compile(scale, backend="aot_eager", dynamic=True)
    for k in (2, 3, 2.5):  # under grad mode: run without it, then restore it
        x = torch.randn(4)
        out = compiled(x, k)
        torch.testing.assert_close(out, scale(x, k))
        assert not out.requires_grad and torch.is_grad_enabled()
    with torch.no_grad():
        compiled(torch.randn(4), 2)
        switches = []
        real = torch._C._set_grad_enabled
        monkeypatch.setattr(
            torch._C, "_set_grad_enabled", lambda mode: (switches.append(mode), real(mode))
        )
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, 2), scale(x, 2))
        assert not torch.is_grad_enabled()
        assert switches == []  # (leaving ``no_grad`` switches it back)


def test_transformed_code_reads_a_shared_module_path_once():
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(4, 4))
    )
    compiled = torchkiln.compile(model, backend="eager")
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(compiled(x), model(x))
    (entry,) = entries_of(type(model).forward)
    assert entry.code_source.count("._modules") == 2  # the outer and inner Sequential's
    assert entry.code_source.count("._parameters") == 2  # one per Linear
    model[2][0].weight = torch.nn.Parameter(torch.randn(4, 4))
    torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.parametrize(
    ("shape", "other"),
    [((2, 3), (3, 2)), ((2, 3), (2, 3, 1)), ((2, 3), (6,)), ((2, 3), ()), ((), (1,))],
)
def test_size_guard_rejects_every_other_shape(shape, other):
    compiled = torchkiln.compile(add_one, backend="eager")
    compiled(torch.randn(shape))
    (entry,) = entries_of(add_one)
    assert ".size()" not in entry.guard_source.split("def ___first_failure")[0]
    assert entry.guard(add_one, torch.randn(shape))
    assert not entry.guard(add_one, torch.randn(other))
    x = torch.randn(other)
    torch.testing.assert_close(compiled(x), add_one(x))


def test_inductor_wrapper_calls_extern_matmuls_through_torchs_binding():
    """Quicker than the overload's C op (``codegen/extern_calls``), and only addmm.default
    takes a call of this shape."""
    pytest.importorskip("torchkiln_inductor", reason="needs the inductor plugin")
    model = torch.nn.Linear(8, 8)
    compiled = torchkiln.compile(model, backend="inductor")
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(4, 8)
            torch.testing.assert_close(compiled(x), model(x))
    (entry,) = entries_of(type(model).forward)
    plan = next(iter(entry.run.__globals__["___graph"].plans.values()))[1]
    wrapper_globals = plan._call.__globals__
    source = plan.artifact.wrapper_source
    assert "_fix_layout(" not in source and "_view(" not in source
    assert wrapper_globals["aten_addmm_default"] is torch._C._VariableFunctions.addmm
