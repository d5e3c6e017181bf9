"""Helpers of the tvm tests: run a function through the backend and say where its ops ran."""

from __future__ import annotations

import contextlib
import logging
import re

import pytest

from torchkiln import logs

pytest.importorskip("tvm", reason="the tvm backend needs apache-tvm: pip install 'torchkiln[tvm]'")


@contextlib.contextmanager
def partition_log(caplog):
    """Capture the partition plans (``TORCHKILN_LOGS=partitions``) and the fallbacks."""
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            yield
    finally:
        logs.set_logs("")


def assert_all_in_tvm(text: str) -> None:
    """Every graph of the log went whole to tvm, and none failed to compile there."""
    assert "failed to compile" not in text, text
    plans = re.findall(r"graph: \d+ partitions? \(([^)]*)\)", text)
    assert plans and all(re.fullmatch(r"tvm: \d+", p) for p in plans), text
