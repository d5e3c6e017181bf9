"""The C++ tensor checks (``torchkiln.capture.native``) answer as the Python checks do.

A guard function folds the dtype, device, requires_grad, size and stride checks of plain
tensors into one call of the C++ checker; its first-failure function keeps them one by
one. Every case here is checked both ways: the checker against the Python expressions it
replaces, and a compiled function under both against eager.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

import torchkiln
from torchkiln import config
from torchkiln.capture import dispatch, native
from torchkiln.capture.guards import TENSOR_CHECK

if shutil.which(os.environ.get("CXX", "g++")) is None:
    pytest.skip("needs a C++ compiler ($CXX, default g++)", allow_module_level=True)
checks = native.build()  # with a compiler, its error (if it can't be built) fails this module


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def python_checks(t, dtype, device, requires_grad, sizes, strides) -> bool:
    """What the guard function's Python expressions compute (they raise where C++ says False),
    and a strided layout: C++ checks it, where Python relies on ``stride()`` raising (which
    ``config.guard_strides = False`` leaves out)."""
    try:
        return (
            t.layout == torch.strided
            and t.dtype is dtype
            and t.device == device
            and t.requires_grad is requires_grad
            and t.shape == sizes
            and (strides is None or t.stride() == strides)
        )
    except Exception:
        return False


BASE = torch.randn(4, 6)
SPECS = [
    (torch.float32, torch.device("cpu"), False, (4, 6), (6, 1)),
    (torch.float32, torch.device("cpu"), False, (4, 6), None),
    (torch.float32, torch.device("cpu"), True, (4, 6), (6, 1)),
    (torch.float64, torch.device("cpu"), False, (4, 6), (6, 1)),
    (torch.float32, torch.device("meta"), False, (4, 6), (6, 1)),
    (torch.float32, torch.device("cpu"), False, (6, 4), (1, 6)),
    (torch.float32, torch.device("cpu"), False, (4, 6, 1), (6, 1, 1)),
    (torch.float32, torch.device("cpu"), False, (4,), (1,)),
]
TENSORS = [
    BASE,
    BASE.t(),
    BASE.t().contiguous().t(),
    BASE.double(),
    BASE.clone().requires_grad_(),
    BASE.clone().requires_grad_() * 1,  # not a leaf
    torch.nn.Parameter(BASE.clone()),
    torch.nn.Parameter(BASE.clone(), requires_grad=False),
    BASE.to("meta"),
    BASE.unsqueeze(-1),
    BASE[:, 0],
    BASE.to_sparse(),  # its strides raise in Python
    torch.zeros(0, 6),
]


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_checker_answers_as_the_python_checks(spec):
    check = checks.tensor_check([spec])
    for i, t in enumerate(TENSORS):
        assert check(t) == python_checks(t, *spec), f"tensor {i}"


def test_checker_takes_many_tensors_in_order_and_refuses_other_objects():
    specs = [(t.dtype, t.device, t.requires_grad, tuple(t.shape), t.stride()) for t in TENSORS[:4]]
    check = checks.tensor_check(specs)
    assert check(*TENSORS[:4])
    assert not check(*TENSORS[1:5])
    assert not check(TENSORS[0], TENSORS[1], TENSORS[2], 3.0)
    with pytest.raises(TypeError, match="takes 4 tensors, got 3"):
        check(*TENSORS[:3])
    with pytest.raises(TypeError, match="spec 0 is not"):
        checks.tensor_check([(torch.float32, "cpu", False, (1,), None)])


def scale_and_shift(x, w, b):
    return x @ w + b


def entry_guard_text() -> str:
    (entry,) = dispatch._caches[scale_and_shift.__code__].all_entries()
    return entry.guard_source.split("def ___first_failure")[0]


def fresh_inputs(**changes):
    inputs = {"x": torch.randn(3, 4), "w": torch.randn(4, 5), "b": torch.randn(5)}
    inputs.update(changes)
    return inputs


@pytest.mark.parametrize("native_guards", [True, False])
def test_guards_fold_into_one_call_only_where_turned_on(native_guards, monkeypatch):
    monkeypatch.setattr(config, "native_guards", native_guards)
    compiled = torchkiln.compile(scale_and_shift, backend="eager")
    compiled(**fresh_inputs())
    text = entry_guard_text()
    assert (f"{TENSOR_CHECK}(L_x, L_w, L_b)" in text) is native_guards
    assert ("L_w.stride() == (5, 1)" in text) is not native_guards


@pytest.mark.parametrize("native_guards", [True, False])
def test_a_change_of_any_checked_metadata_recompiles(native_guards, monkeypatch):
    monkeypatch.setattr(config, "native_guards", native_guards)
    compiled = torchkiln.compile(scale_and_shift, backend="eager")
    changes = [
        {},
        {"b": torch.randn(5, dtype=torch.float64)},
        {"w": torch.randn(4, 5).requires_grad_()},
        {"b": torch.randn(1)},
        {"w": torch.randn(5, 4).t()},
        {"x": torch.randn(3, 4).to_sparse()},
        {},
    ]
    for change in changes:
        inputs = fresh_inputs(**change)
        torch.testing.assert_close(compiled(**inputs), scale_and_shift(**inputs))
    assert torchkiln.counters["frames"]["total"] == len(changes) - 1
    reasons = [e.first_failure(scale_and_shift, *fresh_inputs().values()) for e in
               dispatch._caches[scale_and_shift.__code__].all_entries()]  # fmt: skip
    assert reasons[0] is None and "L_b.dtype is torch.float64" in reasons[1]
