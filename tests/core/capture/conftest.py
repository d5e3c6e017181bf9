"""Capture tests start and end with empty caches and counters."""

import pytest

import torchkiln
from kiln_testing import RecordingBackend


@pytest.fixture(autouse=True)
def fresh_caches():
    """Every test starts and ends with empty caches and counters."""
    torchkiln.reset()
    yield
    torchkiln.reset()


@pytest.fixture
def backend() -> RecordingBackend:
    return RecordingBackend()
