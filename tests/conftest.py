"""Every test runs without captures kept on disk, unless it asks for them.

``config.persist_captures`` is on by default: a second process loads the
captures the first one stored (``torchkiln.capture.persist``). Tests turn it
off so that what one test or run leaves in the cache directory never changes
what another one traces; ``tests/core/capture/test_persist.py`` turns it back
on over a temporary cache directory.
"""

import pytest

import torchkiln


@pytest.fixture(autouse=True)
def no_persisted_captures(monkeypatch):
    monkeypatch.setattr(torchkiln.config, "persist_captures", False)
