"""Graphs handed to compilers are functional aten graphs; the runtime restores eager semantics."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from aot_testing import RecordingCompiler, ops

from kiln_testing import flat_graph
from torchkiln.aot import aot_autograd, default_decompositions

aten = torch.ops.aten


def _compile(fn, inputs, **kwargs):
    rec = RecordingCompiler()
    gm = fn if isinstance(fn, fx.GraphModule) else fx.symbolic_trace(fn)
    return aot_autograd(fw_compiler=rec, **kwargs)(gm, inputs), rec


def _mutable_ops(gm: fx.GraphModule) -> list:
    return [op for op in ops(gm) if hasattr(op, "_schema") and op._schema.is_mutable]


def scale_in_place(x, buf):
    y = x * 2
    y.mul_(3)
    buf.add_(1)
    return y.relu_()


def test_graphs_have_no_in_place_ops() -> None:
    x, buf = torch.randn(4, requires_grad=True), torch.zeros(4)
    compiled, rec = _compile(scale_in_place, [x, buf])
    compiled(x, buf).sum().backward()
    assert len(rec.graphs) == 2
    for gm in rec.graphs:
        assert _mutable_ops(gm) == []


def test_input_mutation_is_applied_to_the_real_input_in_training() -> None:
    x, buf = torch.randn(4, requires_grad=True), torch.zeros(4)
    compiled, _ = _compile(scale_in_place, [x, buf])
    out = compiled(x, buf)
    torch.testing.assert_close(buf, torch.ones(4))
    torch.testing.assert_close(out, (x * 6).relu())


def test_input_mutation_is_applied_to_the_real_input_in_inference() -> None:
    x, buf = torch.randn(4), torch.zeros(4)
    compiled, rec = _compile(scale_in_place, [x, buf])
    compiled(x, buf)
    compiled(x, buf)
    torch.testing.assert_close(buf, torch.full((4,), 2.0))
    assert len(rec.graphs[0].graph.find_nodes(op="output")[0].args[0]) == 2  # new buf, result


def test_several_mutated_inputs_are_written_together_and_in_order(monkeypatch) -> None:
    """Buffers that autograd does not track are written with one ``_foreach_copy_``; a new
    value that is itself a written input (``a.copy_(b)`` then ``b.add_(1)``) is copied
    one input after the other, as eager wrote them."""
    together = []
    foreach_copy = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda *a: together.append(a) or foreach_copy(*a))

    def three_buffers(x, w, b1, b2, b3):
        b1.add_(x)
        b2.mul_(2)
        b3.copy_(x.sin())
        return x * w

    x, w, bufs = torch.randn(4), torch.randn(4, requires_grad=True), [torch.randn(4) for _ in "123"]
    expected = [bufs[0] + x, bufs[1] * 2, x.sin()]
    compiled, _ = _compile(three_buffers, [x, w, *bufs])
    compiled(x, w, *bufs).sum().backward()
    torch.testing.assert_close(bufs, expected)
    assert len(together) == 1 and len(together[0][0]) == 3
    torch.testing.assert_close(w.grad, x)

    def swap_in(a, b):
        a.copy_(b)
        b.add_(1)
        return a + b

    a, b = torch.randn(4), torch.randn(4)
    expected_a, expected_b = b.clone(), b + 1
    compiled, _ = _compile(swap_in, [a, b])
    torch.testing.assert_close(compiled(a, b), expected_a + expected_b)
    torch.testing.assert_close((a, b), (expected_a, expected_b))


def test_mutated_inputs_of_two_dtypes_are_written_with_one_copy_per_dtype(monkeypatch) -> None:
    """``_foreach_copy_`` over mixed dtypes falls back to a copy per tensor (a launch each on a
    GPU): a batch norm's float statistics and integer counter go in one call per dtype."""
    calls = []
    foreach_copy = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda *a: calls.append(a) or foreach_copy(*a))

    def count_and_sum(x, total, count, seen):
        total.add_(x)
        count.add_(1)
        seen.add_(2)
        return x * 2

    x = torch.randn(4)
    total, count, seen = torch.zeros(4), torch.zeros((), dtype=torch.int64), torch.zeros(3)
    compiled, _ = _compile(count_and_sum, [x, total, count, seen])
    compiled(x, total, count, seen)
    torch.testing.assert_close((total, count, seen), (x, torch.tensor(1), torch.full((3,), 2.0)))
    assert sorted(len(targets) for targets, _ in calls) == [1, 2]
    assert all(len({t.dtype for t in targets}) == 1 for targets, _ in calls)


def test_backward_makes_no_zeros_for_outputs_without_tangents() -> None:
    """Autograd would hand the backward a tensor of zeros for each output that takes no
    gradient (a ResNet's 60 running statistics: 60 fill kernels a step); an output the loss
    does not use gets its zeros, as eager's backward sees them."""

    class Fills(torch.utils._python_dispatch.TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.fills = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.fills += func in (aten.zeros.default, aten.fill_.Scalar, aten.zero_.default)
            return func(*args, **(kwargs or {}))

    bn = torch.nn.BatchNorm1d(3)
    gm, state = flat_graph(bn)
    x = torch.randn(5, 3)
    compiled, _ = _compile(gm, [*state, x])
    out = compiled(*state, x)
    with Fills() as mode:
        out.sum().backward()
    assert mode.fills == 0
    expected = torch.autograd.grad(bn(x).sum(), list(bn.parameters()))
    torch.testing.assert_close([p.grad for p in state if p.requires_grad], list(expected))

    def two_outputs(x, w):
        return x * w, (x + w).sin()

    x, w = torch.randn(4), torch.randn(4, requires_grad=True)
    compiled, _ = _compile(two_outputs, [x, w])
    first, _ = compiled(x, w)
    first.sum().backward()
    torch.testing.assert_close(w.grad, x)


def test_batchnorm_running_stats_come_back_as_graph_outputs() -> None:
    bn = torch.nn.BatchNorm1d(3)
    gm, state = flat_graph(bn)
    x = torch.randn(5, 3)
    with torch.no_grad():
        compiled, rec = _compile(gm, [*state, x])
        compiled(*state, x)
    output = rec.graphs[0].graph.find_nodes(op="output")[0].args[0]
    assert len(output) == 4  # running_mean, running_var, num_batches_tracked, y
    assert int(bn.num_batches_tracked) == 1
    torch.testing.assert_close(bn.running_mean, 0.1 * x.mean(0))


def view_and_double(x):
    return x.view(-1), x * 2


def test_output_aliasing_an_input_is_a_view_of_the_real_input() -> None:
    x = torch.randn(2, 3)
    compiled, _ = _compile(view_and_double, [x])
    flat, _ = compiled(x)
    assert flat.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.add_(1)
    torch.testing.assert_close(flat, x.view(-1))


def test_gradient_flows_through_an_output_aliasing_an_input() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    compiled, _ = _compile(view_and_double, [x])
    flat, doubled = compiled(x)
    (flat.sum() + doubled.sum()).backward()
    torch.testing.assert_close(x.grad, torch.full((2, 3), 3.0))


def transposed_product(x, w):
    return (x @ w).t()


def test_an_output_viewing_an_intermediate_can_be_written_in_place() -> None:
    """As in eager (``hidden[mask] = embed`` after the call in wav2vec2's training)."""
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    x_eager, w_eager = (t.detach().clone().requires_grad_() for t in (x, w))
    compiled, _ = _compile(transposed_product, [x, w])
    mask, weights = torch.rand(5, 3) > 0.5, torch.randn(5, 3)
    out, expected = compiled(x, w), transposed_product(x_eager, w_eager)
    for y in (out, expected):
        y[mask] = 0.0
        (y * weights).sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, x_eager.grad)
    torch.testing.assert_close(w.grad, w_eager.grad)


def transposed_product_and_square(x, w):
    y = x @ w
    return y.t(), y * y  # the square's backward reads y


def test_writing_a_value_the_backward_reads_fails_in_the_backward_as_in_eager() -> None:
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    compiled, _ = _compile(transposed_product_and_square, [x, w])
    for fn in (compiled, transposed_product_and_square):
        view, square = fn(x, w)
        view.zero_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            square.sum().backward()


def identity_and_sin(x):
    return x, x.sin()


def test_output_that_is_an_input_is_returned_as_that_input() -> None:
    x = torch.randn(3)
    compiled, _ = _compile(identity_and_sin, [x])
    assert compiled(x)[0] is x


def size_and_cos(x):
    return x.cos(), x.size(0)


def test_non_tensor_output_is_returned_unchanged() -> None:
    x = torch.randn(7, requires_grad=True)
    compiled, _ = _compile(size_and_cos, [x])
    out, size = compiled(x)
    assert size == 7
    torch.testing.assert_close(out, x.cos())


def silu_of(x):
    return F.silu(x) * 2


def test_default_decompositions_bring_graphs_to_core_aten() -> None:
    x = torch.randn(4, requires_grad=True)
    compiled, rec = _compile(silu_of, [x], decompositions=default_decompositions())
    compiled(x)
    assert aten.silu.default not in ops(rec.graphs[0])
    assert all(torch.Tag.core in op.tags for op in ops(rec.graphs[0]))


def test_kept_ops_stay_whole() -> None:
    x = torch.randn(4, requires_grad=True)
    table = default_decompositions(keep=(aten.silu,))
    compiled, rec = _compile(silu_of, [x], decompositions=table)
    compiled(x)
    assert aten.silu.default in ops(rec.graphs[0])


def test_default_decompositions_is_a_fresh_dict_each_call() -> None:
    table = default_decompositions()
    table.clear()
    assert default_decompositions()


def accumulate_into(x, buf):
    buf.add_(x)
    return buf * x


def test_mutating_an_input_with_a_value_that_requires_grad_is_tracked_by_autograd() -> None:
    x, buf = torch.randn(3, requires_grad=True), torch.zeros(3)
    compiled, _ = _compile(accumulate_into, [x, buf])
    out = compiled(x, buf)
    assert buf.requires_grad
    (out.sum() + buf.sum()).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach() + 1)


def put_rows(h, rows, index):
    h.index_put_((index,), rows)  # h[index] = rows
    return h


def test_a_graph_whose_only_output_is_an_input_written_with_grad_computes_gradients() -> None:
    """``hidden[mask] = embed`` returning ``hidden``: no computed output requires grad, yet
    the new value does (it ran as an inference graph, and the gradients went astray)."""
    x, rows = torch.randn(4, 3, requires_grad=True), torch.randn(2, 3, requires_grad=True)
    x_eager, rows_eager = (t.detach().clone().requires_grad_() for t in (x, rows))
    index = torch.tensor([2, 0])
    h, h_eager = x * 1.0, x_eager * 1.0
    compiled, _ = _compile(put_rows, [h, rows, index])
    out, expected = compiled(h, rows, index), put_rows(h_eager, rows_eager, index)
    assert out is h
    weights = torch.randn(4, 3)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, x_eager.grad)
    torch.testing.assert_close(rows.grad, rows_eager.grad)


def add_constant(x):
    return x + torch.arange(3.0)


def test_tensor_constants_in_the_graph_are_kept() -> None:
    x = torch.randn(3, requires_grad=True)
    compiled, _ = _compile(add_constant, [x], decompositions=default_decompositions())
    torch.testing.assert_close(compiled(x), x + torch.arange(3.0))


def sin_of(x):
    return torch.sin(x)


def test_an_added_decomposition_is_applied() -> None:
    table = default_decompositions()
    table[aten.sin.default] = lambda x: torch.cos(x - torch.pi / 2)
    x = torch.randn(4, requires_grad=True)
    compiled, rec = _compile(sin_of, [x], decompositions=table)
    torch.testing.assert_close(compiled(x), torch.sin(x))
    assert aten.sin.default not in ops(rec.graphs[0])
    assert aten.cos.default in ops(rec.graphs[0])


def test_an_op_whose_schema_hides_a_mutation_keeps_it():
    """CUDA's batch norm (``cudnn_batch_norm``) updates the running statistics in place
    without saying so in its schema; its Python decomposition, which runs above autograd
    when the Python dispatcher is on, makes the update visible to functionalization."""

    def bn(x, w, b, running_mean, running_var):
        return aten.cudnn_batch_norm(x, w, b, running_mean, running_var, True, 0.1, 1e-5)[0]

    x, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3)
    stats, expected_stats = (torch.zeros(3), torch.ones(3)), (torch.zeros(3), torch.ones(3))
    compiled, _ = _compile(bn, [x, w, b, *stats])
    out = compiled(x, w, b, *stats)
    expected = F.batch_norm(x, *expected_stats, w, b, training=True, momentum=0.1, eps=1e-5)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(stats, expected_stats)
