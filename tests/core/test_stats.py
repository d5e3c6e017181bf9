"""``torchkiln.counters``: clearing them, as torch's users clear torch's, keeps counting."""

import torch

import torchkiln


def test_cache_hits_are_counted_after_the_counters_are_cleared():
    torchkiln.reset()
    compiled = torchkiln.compile(lambda x: x * 2, backend="eager")
    compiled(torch.ones(2))
    torchkiln.counters.clear()
    for _ in range(3):
        compiled(torch.ones(2))
    assert torchkiln.counters["cache"]["hits"] == 3
