"""SDPA masks strided in their last dimension reach the graph contiguous (capture/sdpa_mask.py):
CUDA's fused attention kernels need that, and fall back to a float32 math path without it."""

import torch
import torch.nn.functional as F

from kiln_testing import RecordingBackend, check_compiled


def _masks_at_sdpa(backend: RecordingBackend) -> list[torch.Tensor]:
    (gm,) = backend.graphs
    calls = [n for n in gm.graph.nodes if n.target is F.scaled_dot_product_attention]
    return [
        (n.kwargs["attn_mask"] if "attn_mask" in n.kwargs else n.args[3]).meta["example_value"]
        for n in calls
    ]


def _qkv_and_keep(batch=2, heads=3, length=8, dim=4):
    q, k, v = (torch.randn(batch, heads, length, dim) for _ in range(3))
    return q, k, v, torch.rand(batch, length) > 0.3


def _qkv_and_bias(batch=2, heads=3, length=8, dim=4):
    q, k, v = (torch.randn(batch, heads, length, dim) for _ in range(3))
    return q, k, v, torch.randn(batch, length)


def test_an_expanded_mask_is_made_contiguous_for_each_call():
    """Like transformers 5.17's padding mask under compilation: a (b, 1, q, k) mask expanded
    from (b, 1, q, 1), passed by keyword to one call and by position to another."""

    def fn(q, k, v, bias):
        mask = bias[:, None, :, None].expand(-1, 1, -1, bias.shape[1])
        first = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(first, k, v, mask)

    backend = RecordingBackend()
    check_compiled(fn, _qkv_and_bias, backend=backend, graphs=1, fullgraph=True)
    masks = _masks_at_sdpa(backend)
    assert len(masks) == 2 and all(m.stride(-1) == 1 for m in masks)


def test_a_dense_mask_is_passed_as_it_is():
    def fn(q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])

    backend = RecordingBackend()
    check_compiled(fn, _qkv_and_keep, backend=backend, graphs=1, fullgraph=True)
    (gm,) = backend.graphs
    assert not any(n.target == "contiguous" for n in gm.graph.nodes)
