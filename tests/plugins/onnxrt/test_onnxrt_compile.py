"""``torchkiln.compile(..., backend="onnxrt")`` end to end: capture, AOT, ONNX, onnxruntime."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_leaves

import torchkiln
from torchkiln import logs


def _capture_works() -> bool:
    try:
        torchkiln.compile(lambda x: x + 1, backend="eager")(torch.ones(1))
    except Exception:
        return False
    return True


pytestmark = pytest.mark.skipif(
    not _capture_works(), reason="torchkiln.compile's capture does not run yet"
)


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(6 * 4 * 4, 5),
    )


def test_compiled_module_trains_like_eager():
    model = cnn()
    reference = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="onnxrt")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        x, target = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
        loss = F.cross_entropy(compiled(x), target)
        reference_loss = F.cross_entropy(reference(x), target)
        torch.testing.assert_close(loss, reference_loss)
        loss.backward()
        reference_loss.backward()
        for p, ref in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, ref.grad)
        optimizer.step()
        reference_optimizer.step()
        optimizer.zero_grad()
        reference_optimizer.zero_grad()
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)


def test_compiled_function_matches_eager_under_no_grad():
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(1)

    compiled = torchkiln.compile(attention, backend="onnxrt")
    with torch.no_grad():
        for _ in range(2):
            q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
            torch.testing.assert_close(compiled(q, k, v), attention(q, k, v))


def test_options_reach_the_backend(tmp_path):
    compiled = torchkiln.compile(
        lambda x: x.sin() + 1, backend="onnxrt", options={"dump_onnx_dir": str(tmp_path)}
    )
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x.sin() + 1)
    assert list(tmp_path.glob("*.onnx"))


def cholesky(x):
    return torch.linalg.cholesky(x) * 2


def test_an_op_without_converter_runs_in_torch_and_the_partition_log_says_why(caplog):
    """``linalg_cholesky_ex`` (and its error check) has no ONNX converter: its partition runs
    in torch, the rest in onnxruntime."""
    compiled = torchkiln.compile(cholesky, backend="onnxrt")
    spd = torch.eye(3) * 4 + 1
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            torch.testing.assert_close(compiled(spd), cholesky(spd))
    finally:
        logs.set_logs("")
    assert "linalg_cholesky_ex.default: onnxrt: not among its ops" in caplog.text


def test_a_failing_conversion_runs_its_graph_in_torch_naming_the_ops(monkeypatch, tmp_path, caplog):
    """A converter that raises (a converter bug) costs its graph: it runs in torch, and the
    warning names the backend, the error and the graph's ops."""
    from torchkiln_onnxrt.converter import CONVERTERS

    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))  # compiled here, not loaded

    def broken(*args, **kwargs):
        raise RuntimeError("converter bug")

    for target in [t for t in CONVERTERS if "sin" in str(t).split(".")]:
        monkeypatch.setitem(CONVERTERS, target, broken)
    compiled = torchkiln.compile(lambda x: x.sin() + 1, backend="onnxrt")
    x = torch.randn(3)
    with caplog.at_level(logging.WARNING, logger="torchkiln"):
        torch.testing.assert_close(compiled(x), x.sin() + 1)
    assert "backend 'onnxrt' failed to compile inference graph (RuntimeError: converter bug)" in (
        caplog.text
    )
    assert "ops: sin.default, add.Tensor" in caplog.text


def test_outputs_come_back_in_eagers_strides():
    """onnxruntime writes outputs contiguously; eager lays a transposed input's pointwise
    results out transposed, a channels-last convolution's channels-last: the runtime
    copies such outputs into eager's strides (the guard fuzz found them contiguous)."""

    def pointwise(x, y):
        return (x.sin() + y * 2).relu(), x.cos()

    conv = nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    cases = [  # the transposed inputs' sizes change: a model with a dynamic dimension too
        (pointwise, lambda n: (torch.randn(n, 4).t(), torch.randn(n, 4).t())),
        (conv, lambda n: (torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last),)),
    ]
    for fn, make in cases:
        torchkiln.reset()
        compiled = torchkiln.compile(fn, backend="onnxrt")
        with torch.no_grad():
            for n in (3, 3, 5, 6):
                args = make(n)
                got, want = compiled(*args), fn(*args)
                torch.testing.assert_close(got, want)
                for g, w in zip(tree_leaves(got), tree_leaves(want)):
                    assert g.stride() == w.stride()


def test_the_plan_cache_keeps_the_strides_outputs_come_back_in():
    from torchkiln_onnxrt import cache
    from torchkiln_onnxrt.compiler import compile_aten_graph

    x = torch.randn(3, 4).t()
    graph = compile_aten_graph(make_fx(lambda x: (x.sin(),))(x), [x])
    loaded = cache.load(cache.dump(graph))
    assert loaded._restrided == graph._restrided == {0: (1, 0)}
    torch.testing.assert_close(loaded(x)[0], x.sin())
    assert loaded(x)[0].stride() == (1, 4)
