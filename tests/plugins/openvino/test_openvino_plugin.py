"""The openvino backend's record, usable or not: listed, its extra named when missing."""

from __future__ import annotations

import importlib.util

import pytest

import torchkiln
from torchkiln.exc import BackendUnavailable
from torchkiln.registry import backend_status, ensure_usable, lookup_backend


def test_openvino_is_listed_with_its_options():
    assert "openvino" in torchkiln.list_backends()
    record = lookup_backend("openvino")
    assert set(record.option_schema()) == {
        "device",
        "precision",
        "num_threads",
        "cache_dir",
        "freeze_weights",
        "disabled_ops",
        "torch_when_faster",
    }
    assert record.option_schema()["precision"].default == "f32"
    assert record.capabilities is not None
    assert "not implemented" not in record.description
    if importlib.util.find_spec("openvino") is not None:
        assert backend_status(record).usable


def test_a_missing_openvino_names_the_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "openvino" else find_spec(name, *a),
    )
    with pytest.raises(BackendUnavailable, match=r"pip install 'torchkiln\[openvino\]'"):
        ensure_usable(lookup_backend("openvino"))
