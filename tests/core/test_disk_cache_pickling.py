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


def test_graph_modules_load_without_tracing(monkeypatch):
    """torch's own pickling traces a GraphModule's code again on load, and fx's tracer patches
    ``nn.Module.__call__`` for every thread meanwhile: another thread's eager module calls
    raised "module is not installed as a submodule" (the guard fuzz's threads found it)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x, w):
        return torch.relu(x @ w).sum(0) + torch.tensor(2.0)

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    gm = make_fx(fn)(x, w)  # with a constant attribute (a get_attr node)
    data = disk_cache.dumps(gm)

    def no_tracing(*args, **kwargs):
        raise AssertionError("a GraphModule was traced while it loaded")

    monkeypatch.setattr(torch.fx.Tracer, "trace", no_tracing)
    loaded = disk_cache.loads(data)
    assert loaded.code == gm.code
    torch.testing.assert_close(loaded(x, w), fn(x, w))
