"""Helpers for the cudagraphs tests: the CUDA skip marker and flat-input module graphs."""

from __future__ import annotations

import pytest
import torch

requires_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
)
