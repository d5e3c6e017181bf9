"""Every lowering against eager on OpInfo sample inputs (float32, bfloat16, int64).

The CI sweep covers the ops of ``torchkiln.testing.opinfo.SWEEP_OPS`` (two float32 samples,
one bfloat16 and one int64 sample each, where the op supports the dtype) in
one compiler run; ``TORCHKILN_FULL_OPINFO=1`` sweeps all of ``op_db``.
"""

import os

import pytest
import torch

pytest.importorskip("expecttest", reason="OpInfo needs expecttest (pip install 'torchkiln[test]')")

from opinfo_sweep import sweep

from torchkiln.testing.opinfo import SWEEP_OPS

FULL = os.environ.get("TORCHKILN_FULL_OPINFO") == "1"


@pytest.fixture(scope="module")
def result():
    return sweep(None if FULL else SWEEP_OPS)


def test_no_op_differs_from_eager(result):
    failures = "\n".join(
        f"{op} {dtype}: {why}"
        for (op, dtype), why in sorted(
            result.failed.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))
        )
    )
    assert not result.failed, f"{len(result.failed)} failing (op, dtype):\n{failures}"


def test_ops_are_lowered_without_aten_fallback(result):
    lowered = sorted(set(result.passed) - result.fallback_only)
    print(f"\n{len(lowered)} ops lowered and matching eager: {' '.join(lowered)}")
    assert len(lowered) >= (300 if FULL else 110)


def test_bfloat16_and_int64_are_covered(result):
    bf16 = [op for op, dtypes in result.passed.items() if torch.bfloat16 in dtypes]
    i64 = [op for op, dtypes in result.passed.items() if torch.int64 in dtypes]
    assert len(bf16) >= 80 and len(i64) >= 40, (len(bf16), len(i64))
