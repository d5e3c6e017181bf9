"""The partitioners choose what forward saves for backward."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F
from aot_testing import RecordingCompiler, ops, saved_values

from torchkiln.aot import (
    MaterializingMinCut,
    aot_autograd,
    default_decompositions,
    min_cut_partition,
    simple_partition,
)

aten = torch.ops.aten


def _compile_and_backward(fn, inputs, partition_fn=min_cut_partition, decompositions=None):
    """Compile ``fn``, run forward and backward; return (fw_gm, bw_gm, grads, eager grads)."""
    fw, bw = RecordingCompiler(), RecordingCompiler()
    compiled = aot_autograd(
        fw_compiler=fw, bw_compiler=bw, partition_fn=partition_fn, decompositions=decompositions
    )(fx.symbolic_trace(fn), inputs)
    grad_out = torch.randn_like(fn(*inputs))
    grads = torch.autograd.grad(compiled(*inputs), inputs, grad_out)
    expected = torch.autograd.grad(fn(*inputs), inputs, grad_out)
    return fw.graphs[0], bw.graphs[0], grads, expected


def two_cosines(x):
    return torch.cos(torch.cos(x))


def test_two_cosines_forward_saves_only_the_input() -> None:
    x = torch.randn(5, 5, 5, requires_grad=True)
    fw_gm, bw_gm, grads, expected = _compile_and_backward(two_cosines, [x])
    assert len(saved_values(bw_gm)) == 1
    fw_output = next(n for n in fw_gm.graph.nodes if n.op == "output").args[0]
    assert fw_output[-1].op == "placeholder"
    torch.testing.assert_close(grads, expected)


def test_two_cosines_backward_recomputes_the_inner_cosine() -> None:
    x = torch.randn(5, 5, 5, requires_grad=True)
    _, bw_gm, _, _ = _compile_and_backward(two_cosines, [x])
    assert ops(bw_gm).count(aten.cos.default) == 1


def test_simple_partition_saves_every_value_backward_reads() -> None:
    x = torch.randn(5, 5, 5, requires_grad=True)
    _, bw_gm, grads, expected = _compile_and_backward(two_cosines, [x], simple_partition)
    assert len(saved_values(bw_gm)) == 2
    assert aten.cos.default not in ops(bw_gm)
    torch.testing.assert_close(grads, expected)


def twenty_pointwise_ops(x):
    for i in range(20):
        x = [torch.sin, torch.tanh, torch.sigmoid, lambda t: t * 1.5 + 0.1][i % 4](x)
    return x


def test_chain_of_twenty_pointwise_ops_saves_at_most_two_tensors() -> None:
    x = torch.randn(64, requires_grad=True)
    _, bw_gm, grads, expected = _compile_and_backward(twenty_pointwise_ops, [x])
    assert len(saved_values(bw_gm)) <= 2
    torch.testing.assert_close(grads, expected)


def tanh_of_multiply_add(x, w):
    return torch.tanh(x * w + x) * 2


def test_min_cut_recomputes_what_a_materializing_reader_reads_unless_told() -> None:
    """Without ``materialized``, the backward recomputes ``tanh(x * w + x)`` from the
    inputs it saves anyway; when its one backward reader (``tanh_backward``) runs
    elsewhere, the forward saves it instead."""
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    _, bw_gm, grads, expected = _compile_and_backward(tanh_of_multiply_add, [x, w])
    assert aten.tanh.default in ops(bw_gm)
    torch.testing.assert_close(grads, expected)

    materializing = MaterializingMinCut(lambda node: node.target is aten.tanh_backward.default)
    _, bw_gm, grads, expected = _compile_and_backward(tanh_of_multiply_add, [x, w], materializing)
    assert aten.tanh.default not in ops(bw_gm)
    assert ops(bw_gm).count(aten.add.Tensor) == 1  # only the gradient of x: nothing recomputed
    torch.testing.assert_close(grads, expected)


def tanh_times_its_input(x, w):
    y = x * w + x
    return torch.tanh(y) * y


def test_min_cut_recomputes_a_value_that_another_backward_reader_fuses() -> None:
    """``tanh(y)`` is read by ``tanh_backward`` (materializing) and by a multiply (not): it
    is recomputed as without ``materialized``."""
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    materializing = MaterializingMinCut(lambda node: node.target is aten.tanh_backward.default)
    _, bw_gm, grads, expected = _compile_and_backward(tanh_times_its_input, [x, w], materializing)
    assert aten.tanh.default in ops(bw_gm)
    torch.testing.assert_close(grads, expected)


def matmul_then_cos(x, w):
    return torch.cos(x @ w)


def test_min_cut_never_recomputes_a_matmul() -> None:
    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    _, bw_gm, grads, expected = _compile_and_backward(matmul_then_cos, [x, w])
    assert ops(bw_gm).count(aten.mm.default) == 2  # grad of x and grad of w only
    torch.testing.assert_close(grads, expected)


def dropout_then_sin(x):
    return torch.sin(F.dropout(x, 0.5, training=True))


def test_min_cut_never_recomputes_a_random_op() -> None:
    x = torch.randn(32, requires_grad=True)
    fw, bw = RecordingCompiler(), RecordingCompiler()
    compiled = aot_autograd(fw_compiler=fw, bw_compiler=bw)(
        fx.symbolic_trace(dropout_then_sin), [x]
    )
    compiled(x).sum().backward()
    random_ops = [
        op
        for op in ops(bw.graphs[0])
        if op is not operator.getitem and torch.Tag.nondeterministic_seeded in op.tags
    ]
    assert random_ops == []


def gelu_mlp(x, w1, w2):
    return F.gelu(F.gelu(x @ w1) * 2.0 + 1.0) @ w2


def _saved_bytes(bw_gm: fx.GraphModule) -> int:
    return sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in saved_values(bw_gm))


def test_min_cut_saves_fewer_bytes_than_simple_partition() -> None:
    inputs = [
        torch.randn(32, 64, requires_grad=True),
        torch.randn(64, 128, requires_grad=True),
        torch.randn(128, 8, requires_grad=True),
    ]
    table = default_decompositions()
    _, bw_min, grads, expected = _compile_and_backward(gelu_mlp, inputs, min_cut_partition, table)
    _, bw_simple, _, _ = _compile_and_backward(gelu_mlp, inputs, simple_partition, table)
    assert _saved_bytes(bw_min) < _saved_bytes(bw_simple)
    torch.testing.assert_close(grads, expected, rtol=1e-4, atol=1e-4)  # decomposed gelu


def scale_by_constant(x):
    return x * torch.full((3,), 2.0)


def test_backward_reading_only_constants_saves_nothing() -> None:
    x = torch.randn(3, requires_grad=True)
    _, bw_gm, grads, expected = _compile_and_backward(
        scale_by_constant, [x], decompositions=default_decompositions()
    )
    assert saved_values(bw_gm) == []
    torch.testing.assert_close(grads, expected)


def bfloat16_layer_norm_gelu(x, w):
    """Mixed precision as the decompositions write it: statistics and gelu in float32."""
    return F.gelu(F.layer_norm(x, (x.shape[-1],)) @ w)


def test_min_cut_saves_bfloat16_values_rather_than_their_float32_upcasts() -> None:
    inputs = [
        torch.randn(16, 64, dtype=torch.bfloat16, requires_grad=True),
        torch.randn(64, 64, dtype=torch.bfloat16, requires_grad=True),
    ]
    table = default_decompositions()
    _, bw_gm, grads, expected = _compile_and_backward(
        bfloat16_layer_norm_gelu, inputs, decompositions=table
    )
    large = [n for n in saved_values(bw_gm) if n.meta["val"].numel() > 16]
    assert large and all(n.meta["val"].dtype == torch.bfloat16 for n in large)
    torch.testing.assert_close(grads, expected, rtol=2e-2, atol=2e-2)


def test_simple_partition_saves_a_size_not_the_tensor_it_is_read_from() -> None:
    """The guard fuzz's finding: with a symbolic batch size, ``h[:, :2]``'s backward needs
    the size of a view of the output ``h``; saving that view made the user's later
    ``h.add_()`` an error in backward ("a view was created in no_grad mode ...")."""
    import zlib

    import torchkiln

    def fn(x, w):
        h = x @ w
        head = h[:, :2]
        zlib.crc32(b"break")
        head.mul_(2.0)
        h.add_(x.sum(-1, keepdim=True))
        return h.tanh(), head

    torchkiln.reset()
    compiled = torchkiln.compile(fn, backend="aot_eager")
    for rows in (2, 4, 5):  # the third call runs the graph compiled with a symbolic size
        x, w = torch.randn(rows, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
        got = compiled(x, w)
        grads = torch.autograd.grad(sum(o.sum() for o in got), (x, w))
        x2, w2 = (t.detach().requires_grad_() for t in (x, w))
        expected = fn(x2, w2)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(
            grads, torch.autograd.grad(sum(o.sum() for o in expected), (x2, w2))
        )
    torchkiln.reset()
