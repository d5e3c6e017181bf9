"""Python semantics that compiled code got wrong (issue #14, item 6; issue #15's T5 bucket):
every compiled call gives what eager Python gives, on the debug backends eager and aot_eager
(inductor where the bug was backend-specific)."""

import collections
import math
import random
from typing import NamedTuple

import pytest
import torch
from torch.testing import assert_close

import torchkiln

BACKENDS = ["eager", "aot_eager"]


def compiled(fn, backend):
    return torchkiln.compile(fn, backend=backend)


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sequence_and_dict_equality_compare_items_by_identity_first(backend):
    """``(x, y) == (x, y)`` is True: containers compare items with ``is`` before ``==``."""

    def fn(x, y):
        out = x
        if (x, y) == (x, y):
            out = out + 1
        if [x, 2] != [x, 2]:
            out = out + 10
        if {"a": y} == {"a": y}:
            out = out + 100
        if x in [x, y]:
            out = out + 1000
        if (x, 1) == [x, 1]:  # a tuple never equals a list
            out = out + 10000
        return out

    x, y = torch.randn(3), torch.randn(3)
    f = compiled(fn, backend)
    assert_close(f(x, y), fn(x, y))
    assert_close(f(x, x), fn(x, x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_string_containment(backend):
    def fn(x):
        return x * ("10" in "10 bar") + 2 * x * ("ab" not in "abc") + 4 * x * (b"1" in b"012")

    x = torch.randn(3)
    assert_close(compiled(fn, backend)(x), fn(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_callable_asks_the_type_for_call(backend):
    class Plain:
        pass

    class WithCall:
        def __call__(self):
            return 1

    def fn(x, plain, with_call):
        flags = [callable(plain), callable(with_call), callable(Plain), callable(x), callable(fn)]
        return x * sum(2**i * flag for i, flag in enumerate(flags))

    x = torch.randn(3)
    assert_close(compiled(fn, backend)(x, Plain(), WithCall()), fn(x, Plain(), WithCall()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_dict_views_see_later_changes(backend):
    def fn(x):
        d = {"a": x}
        keys, values, items = d.keys(), d.values(), d.items()
        d["b"] = x + 1
        total = sum(values) + sum(v for _, v in items)
        return total * len(keys) + len(values) + ("b" in keys) + len(list(items)), keys, d

    x = torch.randn(3)
    out, keys, d = compiled(fn, backend)(x)
    ref, ref_keys, _ = fn(x)
    assert_close(out, ref)
    assert type(keys) is type(ref_keys) and list(keys) == list(ref_keys)
    d["c"] = 1  # the returned view is a view of the returned dict
    assert list(keys) == ["a", "b", "c"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_extend_with_a_generator_over_the_same_list(backend):
    """CPython appends each item as the generator makes it, and the generator's list iterator
    sees the appended items: ``[1, 2]`` grows to 9 items here."""

    def fn(x):
        lst = [1, 2]
        lst.extend(i * 2 for i in lst if i < 10)
        return x * len(lst), lst

    x = torch.randn(3)
    out, lst = compiled(fn, backend)(x)
    ref, ref_lst = fn(x)
    assert_close(out, ref)
    assert lst == ref_lst


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_over_a_list_sees_items_appended_in_the_loop(backend):
    def fn(x):
        lst = [x, x + 1]
        for t in lst:
            if len(lst) < 5:
                lst.append(t * 2)
        return lst

    x = torch.randn(3)
    assert_close(compiled(fn, backend)(x), fn(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_generators_run_lazily_between_the_loop_body(backend):
    def fn(x):
        log = []

        def gen():
            for i in range(3):
                log.append(i)
                yield x * i

        out = []
        for y in gen():
            log.append(-1)
            out.append(y + len(log))
        return out, log

    x = torch.randn(3)
    out, log = compiled(fn, backend)(x)
    ref, ref_log = fn(x)
    assert_close(out, ref)
    assert log == ref_log


@pytest.mark.parametrize("backend", BACKENDS)
def test_map_filter_zip_returned_are_lazy_iterators(backend):
    def fn(x, xs):
        pairs = zip(xs, range(10))
        next(pairs)
        numbered = enumerate(xs, 5)
        inside = sum(t * i for t, i in zip(map(torch.sin, xs), range(3)))
        kept = filter(lambda t: t is not None, [x, None, x + 1])
        return map(lambda t: t * 2, xs), kept, pairs, numbered, inside

    x = torch.randn(3)
    xs, ref_xs = [x, x + 1], [x, x + 1]
    out, ref = compiled(fn, backend)(x, xs), fn(x, ref_xs)
    assert_close(out[-1], ref[-1])
    xs.append(x + 2)  # consumed after the call: the iterators read the list as it is then
    ref_xs.append(x + 2)
    for it, ref_it in zip(out[:-1], ref[:-1]):
        assert type(it) is type(ref_it)
        assert_close(list(it), list(ref_it))


class Pair(NamedTuple):
    a: torch.Tensor
    b: int = 3


class Couple(tuple):
    pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_namedtuples_and_tuple_subclasses_keep_their_type(backend):
    point = collections.namedtuple("point", "x y")

    def fn(x, p, c):
        return Pair(x), p, p._replace(a=x * 2), point(x, 1), c, Couple((x, x + 1)), c[0] + p.a

    x = torch.randn(3)
    out = compiled(fn, backend)(x, Pair(x, 1), Couple((x,)))
    ref = fn(x, Pair(x, 1), Couple((x,)))
    for item, ref_item in zip(out, ref):
        assert type(item) is type(ref_item)
        assert_close(tuple(item) if isinstance(item, tuple) else item, ref_item)


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_random_is_consumed_as_in_eager(backend):
    """Values and the state left behind match eager on every call, not only the first."""

    def fn(x):
        lst = [1, 2, 3, 4]
        random.shuffle(lst)
        return x * lst[0] + random.choice(lst) + random.random() + random.randint(1, 5)

    f = compiled(fn, backend)
    x = torch.randn(3)
    for seed in (0, 1, 2):
        random.seed(seed)
        out, after = f(x), random.random()
        random.seed(seed)
        ref, ref_after = fn(x), random.random()
        assert_close(out, ref)
        assert after == ref_after


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_argument_keeps_its_type_requires_grad_and_gradients(backend):
    def fn(p, x):
        y = p * x if isinstance(p, torch.nn.Parameter) else p - x
        return y.sin(), p.view(3), type(p), p.__class__

    p, x = torch.nn.Parameter(torch.randn(3)), torch.randn(3)
    f = compiled(fn, backend)
    for grad in (False, True, False, True):
        with torch.set_grad_enabled(grad):
            out, ref = f(p, x), fn(p, x)
        assert_close(out[:2], ref[:2])
        assert out[2:] == ref[2:]
        for o, r in zip(out[:2], ref[:2]):
            assert (o.requires_grad, type(o), o.is_leaf) == (r.requires_grad, type(r), r.is_leaf)
    (grad,) = torch.autograd.grad(out[0].sum(), p)
    (ref_grad,) = torch.autograd.grad(ref[0].sum(), p)
    assert_close(grad, ref_grad)


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_module_attribute_set_inside_keeps_requires_grad(backend):
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            self.cache = self.w * 2
            self.scale = torch.nn.Parameter(torch.ones(3))
            return x * self.scale + self.cache

    m, x = Cache(), torch.randn(3)
    out = compiled(m, backend)(x)
    assert m.cache.requires_grad and isinstance(m.scale, torch.nn.Parameter)
    grads = torch.autograd.grad(out.sum() + m.cache.sum(), [m.w, m.scale])
    assert_close(grads[0], torch.full((3,), 4.0))
    assert_close(grads[1], x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_state_queries_are_guarded(backend):
    def fn(x):
        flags = [
            x.is_inference(),
            x[1:].is_inference(),
            torch.is_inference(x),
            x.is_leaf,
            x.is_conj(),
            x.storage_offset() > 0,
        ]
        return x.abs() * sum(2**i * flag for i, flag in enumerate(flags))

    f = compiled(fn, backend)
    with torch.inference_mode():
        inference = torch.randn(3)
    leaf = torch.randn(3, requires_grad=True)
    tensors = [torch.randn(3), inference, leaf, leaf * 1, torch.randn(4)[1:]]
    tensors.append(torch.randn(3, dtype=torch.complex64).conj())
    for t in tensors:
        assert_close(f(t), fn(t))


def test_strides_are_guarded_where_read_when_stride_guards_are_off(monkeypatch):
    monkeypatch.setattr(torchkiln.config, "guard_strides", False)

    def fn(x):
        return x * 2 if x.t().is_contiguous() else x

    f = compiled(fn, "eager")
    for t in (torch.randn(3, 3), torch.randn(3, 3).t()):
        assert_close(f(t), fn(t))


@pytest.mark.parametrize("backend", BACKENDS)
def test_signed_zero_constants_are_not_interchangeable(backend):
    def fn(x, c, pair):
        return x / c + x / pair[0] + pair[1][0]

    f = compiled(fn, backend)
    x = torch.ones(3)
    nan = float("nan")
    for c, pair in [(0.0, (0.0, (1.0,))), (-0.0, (0.0, (1.0,))), (0.0, (-0.0, (nan,)))]:
        assert_close(f(x, c, pair), fn(x, c, pair), equal_nan=True)
    other_nan = (-0.0, (float("nan"),))  # another nan object: still nan, no recompile
    assert_close(f(x, 0.0, other_nan), fn(x, 0.0, other_nan), equal_nan=True)
    assert frames() == 3


def relative_position_bucket(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    """T5's ``_relative_position_bucket``: ``buckets`` starts as the int 0."""
    buckets = 0
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    buckets += torch.where(is_small, relative_position, large)
    return buckets


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_operator_on_a_python_number_and_a_tensor(backend):
    """``int`` has no ``__iadd__``: ``n += t`` is ``n = n + t``, and ``n`` becomes a tensor."""
    positions = torch.arange(9)[None, :] - torch.arange(7)[:, None]
    for bidirectional in (True, False):
        f = compiled(lambda r, b=bidirectional: relative_position_bucket(r, b), backend)
        assert_close(f(positions), relative_position_bucket(positions, bidirectional))

    def fn(t):
        n, f, s = 1, 1.5, (t,)
        n *= t
        f += t
        s += (t * 2,)
        return n, f, s

    t = torch.randn(3)
    assert_close(compiled(fn, backend)(t), fn(t))


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_operators_on_arguments_change_them(backend):
    class Total:
        def __init__(self):
            self.value = 0

        def __iadd__(self, other):
            self.value = self.value + other
            return self

    def fn(x, lst, seen, total):
        lst *= 2
        seen |= {3}
        total += x
        return total.value

    x = torch.randn(3)
    args, ref_args = ([1], {1}, Total()), ([1], {1}, Total())
    assert_close(compiled(fn, backend)(x, *args), fn(x, *ref_args))
    assert args[:2] == ref_args[:2]
    assert_close(args[2].value, ref_args[2].value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_list_the_frame_made_is_one_object_wherever_it_goes(backend):
    def fn(x):
        lst = [x]
        return lst, lst, {"a": lst}

    a, b, d = compiled(fn, backend)(torch.randn(3))
    assert a is b is d["a"]
