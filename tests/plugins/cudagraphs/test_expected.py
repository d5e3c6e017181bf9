"""A recording's fast check of a call's arguments (``capture._Expected``), on CPU tensors:
what it compares is the same on any device, in C++ (``tensors_check``) and in Python."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from torchkiln.capture import native as native_guards
from torchkiln_cudagraphs import capture


@pytest.mark.parametrize("native", [True, False], ids=["tensors_check", "python"])
def test_the_fast_check_compares_values_layouts_and_the_addresses_read_in_place(
    native, monkeypatch
):
    if native:
        if shutil.which(os.environ.get("CXX", "g++")) is None:
            pytest.skip("the C++ check needs a C++ compiler ($CXX, default g++)")
        native_guards.build()
    else:
        monkeypatch.setattr(capture, "tensors_check", lambda expected: None)
    w, x = torch.randn(4, 4), torch.randn(3)
    expected = capture._Expected([w, x, 2], copied={1}, addresses=[w.data_ptr(), 0, 0])
    assert (expected.native is not None) == native
    assert expected.matches([w, x, 2])
    assert expected.matches([w, torch.randn(3), 2])  # a copied input: any tensor of its layout
    assert not expected.matches([w.clone(), x, 2])  # read in place, moved
    assert not expected.matches([w.t(), x, 2])  # at its address, in another layout
    assert not expected.matches([w.view(torch.int32), x, 2])  # at its address, another dtype
    assert not expected.matches([w, x.view(3, 1), 2])
    assert not expected.matches([w, x.double(), 2])
    assert not expected.matches([w, x, 3])
    assert not expected.matches([w, x, 2.0])
    assert not expected.matches([w, x, torch.tensor(2)])
    assert not expected.matches([w, 1.0, 2])
    assert not expected.matches([w, x])
