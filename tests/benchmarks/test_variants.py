"""``--backends`` entries: options after ``?`` and OpenVINO's own torch.compile anchor."""

from __future__ import annotations

import pytest

from benchmarks.variants import OPENVINO_TORCH, TORCHKILN, Variant, parse_variant


def test_options_follow_a_question_mark():
    variant = parse_variant("kiln:openvino?precision=bf16&freeze_weights=true&num_threads=2")
    assert variant == Variant(
        "kiln:openvino?precision=bf16&freeze_weights=true&num_threads=2",
        TORCHKILN,
        "openvino",
        None,
        (("precision", "bf16"), ("freeze_weights", True), ("num_threads", 2)),
    )
    assert parse_variant("inductor:reduce-overhead").options == ()


def test_the_openvino_anchor_is_its_own_kind():
    variant = parse_variant("openvino.torch?precision=bf16")
    assert (variant.label, variant.kind, variant.options) == (
        "openvino.torch?precision=bf16",
        OPENVINO_TORCH,
        (("precision", "bf16"),),
    )


def test_an_option_without_a_value_is_refused():
    with pytest.raises(ValueError, match="'fast' is not KEY=VALUE"):
        parse_variant("kiln:openvino?fast")
