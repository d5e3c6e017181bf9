"""Inputs that share memory with a mutated input (issue #14, item 3): guarded by storage, and
compiled correctly when a first call already aliases (writes seen through every alias)."""

import pytest
import torch
from torch.testing import assert_close

import torchkiln

BACKENDS = ["eager", "aot_eager", "inductor"]


def add_then_read(a, b):
    a.add_(1)
    return a + b


def write_through_a_view(a, b):
    a[:2].mul_(2)
    return b * 3


def setitem(a, b):
    a[0] = 5.0
    return b.sum()


ALIASINGS = {
    "distinct": lambda x: (x, x.clone()),
    "same tensor": lambda x: (x, x),
    "full slice": lambda x: (x, x[:]),
    "view of view": lambda x: (x, x.view(2, 3).view(6)),
    "overlapping": lambda x: (x[:4], x[2:]),
    "overlapping swapped": lambda x: (x[2:], x[:4]),
    "disjoint views": lambda x: (x[:3], x[3:]),
}


def check(compiled, fn, make_args):
    x_compiled = torch.randn(6)
    x_eager = x_compiled.clone()
    out = compiled(*make_args(x_compiled))
    assert_close(out, fn(*make_args(x_eager)))
    assert_close(x_compiled, x_eager)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [add_then_read, write_through_a_view, setitem])
def test_aliasing_changes_between_calls(backend, fn):
    compiled = torchkiln.compile(fn, backend=backend)
    for make_args in [*ALIASINGS.values(), *ALIASINGS.values()]:
        check(compiled, fn, make_args)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first", list(ALIASINGS))
def test_first_call_already_aliased(backend, first):
    compiled = torchkiln.compile(add_then_read, backend=backend)
    check(compiled, add_then_read, ALIASINGS[first])
    check(compiled, add_then_read, ALIASINGS[first])
    check(compiled, add_then_read, ALIASINGS["distinct"])


def test_identical_aliasing_reuses_the_entry():
    compiled = torchkiln.compile(add_then_read, backend="aot_eager")
    for _ in range(3):
        check(compiled, add_then_read, ALIASINGS["overlapping"])
    assert torchkiln.counters["frames"]["total"] == 1


def test_graph_without_mutation_ignores_aliasing():
    compiled = torchkiln.compile(lambda a, b: a * b, backend="aot_eager")
    x = torch.randn(6)
    compiled(x, x.clone())
    compiled(x, x)
    assert torchkiln.counters["frames"]["total"] == 1


def test_aliased_inputs_that_require_grad_run_eagerly_and_correctly():
    def fn(a, b):
        a.add_(1)
        return (a * b).sum()

    compiled = torchkiln.compile(fn, backend="aot_eager")
    leaf_c = torch.randn(6, requires_grad=True)
    leaf_e = leaf_c.detach().clone().requires_grad_()
    xc, xe = leaf_c * 1, leaf_e * 1
    out = compiled(xc, xc[:])
    ref = fn(xe, xe[:])
    assert_close(out, ref)
    out.backward()
    ref.backward()
    assert_close(leaf_c.grad, leaf_e.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_layout_change_of_an_input(backend):
    def fn(x):
        x.unsqueeze_(0)
        return x.sum(-1)

    compiled = torchkiln.compile(fn, backend=backend)
    for _ in range(2):
        x_compiled = torch.randn(2, 3)
        x_eager = x_compiled.clone()
        assert_close(compiled(x_compiled), fn(x_eager))
        assert x_compiled.shape == x_eager.shape == (1, 2, 3)


def returns_a_view_of_its_input(x):
    return x[1:], x * 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_returned_view_keeps_requires_grad_like_eager(backend, mode):
    """Views keep their base's requires_grad under no_grad and inference mode alike; a plan
    first built for an input that did not require grad must not detach them later."""
    compiled = torchkiln.compile(returns_a_view_of_its_input, backend=backend)
    compiled(torch.randn(2, 3))
    x = torch.randn(2, 3, requires_grad=True)
    context = torch.no_grad() if mode == "no_grad" else torch.inference_mode()
    with context:
        out, ref = compiled(x), returns_a_view_of_its_input(x)
    assert [o.requires_grad for o in out] == [r.requires_grad for r in ref]
    assert_close(out, ref)


def reshapes_of_its_input(x):
    return x.reshape(-1), x.permute(0, 2, 3, 1).reshape(-1, 3)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_returned_reshape_view_keeps_requires_grad_under_inference_mode(backend):
    """``reshape`` returns a view where the strides allow; under inference mode eager's
    keeps its base's requires_grad, which the AOT layer's fake analysis had lost (found by
    the guard fuzz's layout mutations)."""
    torchkiln.reset()
    compiled = torchkiln.compile(reshapes_of_its_input, backend=backend)
    x = torch.randn(1, 3, 4, 6, requires_grad=True)
    with torch.inference_mode():
        out, ref = compiled(x), reshapes_of_its_input(x)
    assert [o.requires_grad for o in out] == [r.requires_grad for r in ref] == [True, True]
    assert all(o.untyped_storage()._cdata == x.untyped_storage()._cdata for o in out)
    assert_close(out, ref)


def slices_of_its_input(x):
    return x[1:], x.t()[:, 1]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_views_of_an_expanded_input_route_gradients_as_in_eager(backend):
    """An expanded leaf that requires grad (stride 0: its rows share memory): the output
    views rebuilt with ``as_strided`` summed the gradient over the shared elements; eager's
    slice and select route it to the elements they read (found by the guard fuzz)."""
    torchkiln.reset()
    compiled = torchkiln.compile(slices_of_its_input, backend=backend)

    def leaf(rows):
        return torch.arange(1.0, rows + 1).reshape(rows, 1).expand(rows, 3).requires_grad_()

    for rows in (2, 4, 5):  # the second size compiles with the rows symbolic
        x, expected_x = leaf(rows), leaf(rows)
        out, expected = compiled(x), slices_of_its_input(expected_x)
        assert_close(out, expected)
        cotangents = [torch.randn_like(e) for e in expected]
        torch.autograd.backward(out, cotangents)
        torch.autograd.backward(expected, cotangents)
        assert_close(x.grad, expected_x.grad)


def views_of_an_intermediate(x):
    y = x * 2
    return y, y.view(-1), y[0], y[1:].t()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_outputs_that_view_one_intermediate_share_its_memory(backend, requires_grad):
    compiled = torchkiln.compile(views_of_an_intermediate, backend=backend)
    x = torch.randn(3, 4, requires_grad=requires_grad)
    out, ref = compiled(x), views_of_an_intermediate(x)
    assert_close(out, ref)
    storages = {o.untyped_storage()._cdata for o in out}
    assert len(storages) == 1
    if requires_grad:
        grads = [torch.randn_like(r) for r in ref]
        torch.autograd.backward(out, grads)
        expected = torch.autograd.grad(ref, x, grads)[0]
        assert_close(x.grad, expected)
    else:
        out[0].add_(1)  # seen through the other views, as in eager
        ref[0].add_(1)
        assert_close(out, ref)


def sets_requires_grad(x):
    x.requires_grad_(True)
    return x * 2


def sets_storage(x, y):
    x.set_(y)
    return x + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_requires_grad_set_on_an_input_in_place(backend):
    compiled = torchkiln.compile(sets_requires_grad, backend=backend)
    x = torch.randn(3)
    out = compiled(x)
    assert x.requires_grad and out.requires_grad
    out.sum().backward()
    assert_close(x.grad, torch.full((3,), 2.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_storage_set_on_an_input_in_place(backend):
    compiled = torchkiln.compile(sets_storage, backend=backend)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    assert_close(compiled(x, y), y + 1)
    assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def copy_into(out, x):
    out.copy_(x.sin())
    return out


@pytest.mark.parametrize("dynamic", [True, None])
def test_aliased_inputs_of_another_size_recompile(dynamic):
    """Aliases are rebuilt from their shared storage with the sizes they had: with symbolic
    sizes, another size passed every guard and was rebuilt with the old sizes (a crash when
    smaller, a part of the tensor left unwritten when larger)."""
    compiled = torchkiln.compile(copy_into, backend="eager", dynamic=dynamic)
    for rows, total in ((4, 4), (2, 2), (3, 5), (2, 5)):
        buffer = torch.randn(total, 3)
        eager_buffer = buffer.clone()
        expected = copy_into(eager_buffer[:rows], eager_buffer[:rows])
        assert_close(compiled(buffer[:rows], buffer[:rows]), expected)
        assert_close(buffer, eager_buffer)
