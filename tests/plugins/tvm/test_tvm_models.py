"""Models through the tvm backend against eager: inference and training, gradients included."""

from __future__ import annotations

import torch
from torch import nn

import torchkiln
from tests.plugins.tvm.tvm_checks import assert_all_in_tvm, partition_log


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


def grads(model, out):
    return torch.autograd.grad(out.sum(), list(model.parameters()))


def test_eval_batch_norm_uses_running_statistics(caplog):
    """tvm's own torch importer normalizes with batch statistics in eval mode (error 0.71)."""
    torch.manual_seed(0)
    model = cnn()
    with torch.no_grad():
        for _ in range(3):  # running statistics away from the batch's
            model(torch.randn(8, 3, 16, 16) * 3 + 1)
    model.eval()
    compiled = torchkiln.compile(model, backend="tvm")
    with torch.no_grad(), partition_log(caplog):
        compiled(torch.randn(2, 3, 16, 16))
    assert_all_in_tvm(caplog.text)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_mlp_trains_whole_in_tvm(caplog):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    compiled = torchkiln.compile(model, backend="tvm")
    with partition_log(caplog):
        compiled(torch.randn(8, 16)).sum().backward()
    assert_all_in_tvm(caplog.text)
    x = torch.randn(8, 16)
    out, expected = compiled(x), model(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads(model, out), grads(model, expected))


def test_cnn_training_partitions_backward_convolutions_away(caplog):
    torch.manual_seed(0)
    model, twin = cnn(), cnn()
    twin.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model, backend="tvm")
    x = torch.randn(4, 3, 16, 16)
    expected = twin(x)
    with partition_log(caplog):
        out = compiled(x)
        torch.testing.assert_close(grads(model, out), grads(twin, expected))
    torch.testing.assert_close(out, expected)
    # the running statistics the training step updated in place
    torch.testing.assert_close(list(model.buffers()), list(twin.buffers()))
    assert "failed to compile" not in caplog.text
    assert "convolution_backward.default: tvm: not among its ops" in caplog.text
    assert "max_pool2d_with_indices.default: tvm: the graph reads its indices" in caplog.text


def test_outputs_are_fresh_and_laid_out_as_eager():
    def fn(x, w):
        return x, x.view(-1), (x @ w).t(), w + 1, torch.arange(3.0), torch.full((2,), -torch.inf)

    compiled = torchkiln.compile(fn, backend="tvm")
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    first = compiled(x, w)
    torch.testing.assert_close(first, fn(x, w))
    assert first[2].stride() == fn(x, w)[2].stride()
    second = compiled(x, w)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(first[2:], second[2:]))
    first[4].add_(1)  # a constant of the graph, returned: the next call's is untouched
    torch.testing.assert_close(compiled(x, w)[4], torch.arange(3.0))
    x.add_(1)  # eager's outputs alias x: the compiled ones show the write too
    torch.testing.assert_close(first[0], x)
    torch.testing.assert_close(first[1], x.view(-1))


def test_an_output_relax_simplified_to_an_input_is_a_copy():
    """``x * 1.0``: Relax returns the input as it is; eager's result is a tensor of its own,
    which a write does not carry into ``x`` (the guard fuzz found the tvm output aliased)."""
    compiled = torchkiln.compile(lambda x: (x * 1.0, (x * 1.0).reshape(-1)), backend="tvm")
    for _ in range(2):
        x = torch.randn(2, 3)
        scaled, flat = compiled(x)
        torch.testing.assert_close(scaled, x)
        scaled.add_(1)
        flat.add_(1)
        torch.testing.assert_close(scaled, x + 1)
        assert not torch.equal(scaled, x)


def test_threads_call_one_graph_at_once():
    """A Relax VM runs one call at a time: each thread gets its own (one shared VM crashed,
    'reg < frame->register_file.size()', when the guard fuzz called it from 8 threads)."""
    import threading

    def fn(x):
        return (x.sin() * 2).sum(0), x.cos()

    compiled = torchkiln.compile(fn, backend="tvm")
    compiled(torch.randn(64, 32))
    errors, barrier = [], threading.Barrier(8)

    def worker():
        try:
            barrier.wait()
            for _ in range(20):
                x = torch.randn(64, 32)
                torch.testing.assert_close(compiled(x), fn(x))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
