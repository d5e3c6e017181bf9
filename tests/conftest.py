"""Every test runs without captures kept on disk, unless it asks for them.

``config.persist_captures`` is on by default: a second process loads the
captures the first one stored (``torchkiln.capture.persist``). Tests turn it
off so that what one test or run leaves in the cache directory never changes
what another one traces; ``tests/core/capture/test_persist.py`` turns it back
on over a temporary cache directory.
"""

import os

import pytest
import torch

# Triton reads TRITON_INTERPRET when it is imported, and test modules collected early import it
# (transformers, torch._inductor): choose the interpreter before any of them, so that the Triton
# generator's tests run their kernels on CPU tensors.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torchkiln
from torchkiln.capture import native

# The C++ guard checks, loaded before any test points the cache elsewhere (the Makefile's
# install-test builds them), so that every test's guards check tensors the same way.
native.module()


@pytest.fixture(autouse=True)
def no_persisted_captures(monkeypatch):
    monkeypatch.setattr(torchkiln.config, "persist_captures", False)
