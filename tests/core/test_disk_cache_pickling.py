"""What the disk cache's pickler stores by name: ops, and pytree leaf specs."""

from __future__ import annotations

import warnings

import torch
import torch.utils._pytree as pytree

from torchkiln import disk_cache


def test_ops_round_trip_by_name():
    ops = [torch.ops.aten.add.Tensor, torch.ops.aten.add]
    assert disk_cache.loads(disk_cache.dumps(ops)) == ops


def test_leaf_specs_load_without_torchs_deprecation_warning():
    """A cached graph's output spec holds leaf specs; torch's own unpickling of one calls
    ``LeafSpec``'s deprecated constructor, a FutureWarning on every cache load."""
    _, spec = pytree.tree_flatten([1, (2, {"a": 3})])
    data = disk_cache.dumps(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert disk_cache.loads(data) == spec
