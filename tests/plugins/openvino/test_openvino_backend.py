"""Models through the openvino backend against eager: inference, a training step, options."""

from __future__ import annotations

import copy
import logging
import sys
import threading

import pytest

pytest.importorskip("openvino", reason="openvino is not installed")

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchkiln
from torchkiln import logs
from torchkiln.aot import KEEP_WHOLE
from torchkiln.exc import InvalidOptionError
from torchkiln_openvino.compiler import compile_aten_graph, decompositions

aten = torch.ops.aten
F32 = {"rtol": 1e-4, "atol": 1e-4}


class Block(nn.Module):
    """A pre-norm transformer block: layer norms, fused attention, a GELU MLP."""

    def __init__(self, dim: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


def mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4)), (5, 8)


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 5),
    ), (2, 3, 8, 8)


def block():
    return Block(), (2, 6, 16)


def train_step(model, compiled, x):
    """One SGD step; returns the loss and the parameters and buffers after it."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = compiled(x).square().mean()
    loss.backward()
    optimizer.step()
    return loss.detach(), [t.detach().clone() for t in (*model.parameters(), *model.buffers())]


@pytest.mark.parametrize("make", [mlp, cnn, block])
@pytest.mark.parametrize("train_mode", [True, False], ids=["train", "eval"])
def test_inference_and_a_training_step_match_eager(make, train_mode):
    torch.manual_seed(0)
    model, shape = make()
    model.train(train_mode)
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend="openvino")
    for _ in range(2):
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), twin(x), **F32)
    x = torch.randn(shape)
    torch.testing.assert_close(train_step(model, compiled, x), train_step(twin, twin, x), **F32)


def test_a_chain_runs_what_openvino_cannot_convert_with_inductor(caplog):
    torch.manual_seed(0)
    model, shape = cnn()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(model, backend=["openvino", "inductor"])
    x = torch.randn(shape)
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            result = train_step(model, compiled, x)
    finally:
        logs.set_logs("")
    torch.testing.assert_close(result, train_step(twin, twin, x), **F32)
    assert "max_pool2d_with_indices_backward.default: openvino: not among its ops" in caplog.text
    assert "-> inductor" in caplog.text


def test_inference_keeps_norms_and_attention_whole(caplog):
    table = decompositions()
    kept = {aten.native_layer_norm.default, aten._native_batch_norm_legit_no_training.default}
    assert not (KEEP_WHOLE | kept) & table.keys()
    model = Block().eval()
    compiled = torchkiln.compile(model, backend="openvino")
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"), torch.no_grad():
            x = torch.randn(2, 6, 16)
            torch.testing.assert_close(compiled(x), model(x), **F32)
    finally:
        logs.set_logs("")
    assert "inference graph: 1 partition (openvino: 1)" in caplog.text
    assert "native_layer_norm.default x2" in caplog.text
    assert "_scaled_dot_product_flash_attention_for_cpu.default" in caplog.text


def test_outputs_are_fresh_tensors_on_every_call():
    compiled = torchkiln.compile(lambda x: (x * 2, x.t()), backend="openvino")
    x = torch.randn(3, 4)
    first = compiled(x)
    kept = [t.clone() for t in first]
    second = compiled(torch.randn(3, 4))
    torch.testing.assert_close(first, kept, rtol=0, atol=0)
    assert {t.data_ptr() for t in first}.isdisjoint(t.data_ptr() for t in second)
    assert first[1].stride() == x.t().stride()


def test_an_input_returned_as_it_is_comes_back_as_a_copy():
    """OpenVINO leaves such an output's bound tensor unwritten."""
    graph = make_fx(lambda x: (aten.alias.default(x), aten.mul.Tensor(x, 2)))
    x = torch.randn(4, 3).t()
    compiled = compile_aten_graph(graph(x), [x])
    for _ in range(2):
        x = torch.randn(4, 3).t()
        same, double = compiled(x)
        torch.testing.assert_close((same, double), (x, x * 2), rtol=0, atol=0)
        assert same.data_ptr() != x.data_ptr() and same.stride() == x.stride()


def test_an_input_copied_contiguous_comes_back_in_the_traced_strides():
    """``x.contiguous()`` of a transposed input: OpenVINO passes the input through, the copy
    the runtime returns is laid out as eager's (the guard fuzz found it transposed)."""
    torchkiln.reset()
    compiled = torchkiln.compile(lambda x: (x * 2, x.contiguous()), backend="openvino")
    for _ in range(2):
        x = torch.randn(3, 2).t()
        _, out = compiled(x)
        torch.testing.assert_close(out, x, rtol=0, atol=0)
        assert out.is_contiguous() and out.data_ptr() != x.data_ptr()


def test_threads_each_get_their_own_results():
    compiled = torchkiln.compile(lambda x: torch.tanh(x) @ x.t(), backend="openvino")
    compiled(torch.randn(64, 64))
    inputs = [torch.randn(64, 64) for _ in range(4)]
    results = [None] * len(inputs)

    def run(i):
        for _ in range(20):
            results[i] = compiled(inputs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.testing.assert_close(results, [torch.tanh(x) @ x.t() for x in inputs], **F32)


def test_options_are_checked():
    with pytest.raises(InvalidOptionError, match="precision"):
        torchkiln.compile(lambda x: x + 1, backend="openvino", options={"precision": "int8"})
    with pytest.raises(InvalidOptionError, match="num_threads"):
        torchkiln.compile(lambda x: x + 1, backend="openvino", options={"num_threads": 0})
    compiled = torchkiln.compile(
        lambda x: x + 1, backend="openvino", options={"disabled_ops": ["aten.nonsense"]}
    )
    with pytest.raises(Exception, match="'aten.nonsense' is not an aten op"):
        compiled(torch.randn(2))


def test_disabled_ops_run_with_the_next_backend(caplog):
    def fn(x):
        return F.gelu(x @ x) + 1

    compiled = torchkiln.compile(
        fn, backend="openvino", options={"disabled_ops": ["aten.gelu", "aten.add.Tensor"]}
    )
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            x = torch.randn(4, 4)
            torch.testing.assert_close(compiled(x), fn(x), **F32)
    finally:
        logs.set_logs("")
    assert "gelu.default: openvino: named in its option disabled_ops" in caplog.text
    assert "add.Tensor: openvino: named in its option disabled_ops" in caplog.text
    assert "partition_0 -> openvino (1 op): mm.default" in caplog.text


def test_precision_and_threads():
    model, shape = mlp()
    x = torch.randn(shape)
    options = {"precision": "bf16", "num_threads": 1}
    with torch.no_grad():
        compiled = torchkiln.compile(model, backend="openvino", options=options)
        torch.testing.assert_close(compiled(x), model(x), rtol=1.6e-2, atol=1e-2)


def test_openvino_torch_is_never_imported():
    """``openvino.torch`` (the anchor's torch.compile backend) imports dynamo and inductor."""
    compiled = torchkiln.compile(lambda x: torch.relu(x) * 2, backend="openvino")
    compiled(torch.randn(3))
    assert "openvino.frontend.pytorch.torchdynamo.backend" not in sys.modules
    assert not [m for m in sys.modules if m == "openvino.torch" or m.startswith("openvino.torch.")]


def test_an_input_written_in_place_between_calls_is_read_again():
    """The runtime keeps an input bound while it is the same tensor at the same address."""
    model = nn.Linear(8, 4)
    compiled = torchkiln.compile(model, backend="openvino")
    x = torch.randn(3, 8)
    for _ in range(3):
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), **F32)
            model.weight.mul_(-2)
            x.add_(1)


def test_every_output_of_a_split_runs_in_openvino(caplog):
    def fn(x):
        q, k, v = x.split([2, 3, 1], dim=-1)
        return q * 2, k.relu(), v + 1

    compiled = torchkiln.compile(fn, backend="openvino")
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            x = torch.randn(2, 6)
            torch.testing.assert_close(compiled(x), fn(x), **F32)
    finally:
        logs.set_logs("")
    assert "inference graph: 1 partition (openvino: 1)" in caplog.text


def test_a_cumulative_sum_of_booleans_counts(caplog):
    """As in Hugging Face's position ids from an attention mask, in OpenVINO."""

    def fn(x):
        counts = (x > 0).cumsum(1)
        return counts, counts * x

    compiled = torchkiln.compile(fn, backend="openvino")
    x = torch.randn(4, 6)
    logs.set_logs("partitions")
    try:
        with caplog.at_level(logging.INFO, logger="torchkiln"):
            torch.testing.assert_close(compiled(x), fn(x), **F32)
    finally:
        logs.set_logs("")
    assert "inference graph: 1 partition (openvino: 1)" in caplog.text
