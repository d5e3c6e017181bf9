"""Spec (issue 3): Python-only computation runs at capture time; the graph keeps only tensor ops.

Loops over Python iterables are unrolled, branches on Python values and on
tensor metadata are decided while capturing, containers are built and
unpacked symbolically: every case here is exactly one graph.
"""

import collections
import dataclasses
import math
import operator

import pytest
import torch

from kiln_testing import check_compiled

Point = collections.namedtuple("Point", ["x", "y"])


@dataclasses.dataclass
class Config:
    scale: float
    shift: float
    use_relu: bool


def test_int_and_float_arithmetic_from_shapes(backend):
    def fn(x):
        n = x.shape[0] * 2 + 1
        m = (x.shape[1] - 1) / 4
        k = x.numel() // 3 % 5
        return x * n + m - k

    check_compiled(fn, lambda: (torch.randn(3, 5),), backend=backend, graphs=1)


def test_string_formatting_builds_dict_keys(backend):
    def fn(params):
        total = 0
        for i in range(3):
            total = total + params[f"w{i}"] * (i + 1)
        return total

    check_compiled(
        fn, lambda: ({f"w{i}": torch.randn(2) for i in range(3)},), backend=backend, graphs=1
    )


def test_string_methods_on_constants(backend):
    def fn(x, name):
        if name.upper().startswith("SIN"):
            return x.sin()
        return x.cos()

    check_compiled(fn, lambda: (torch.randn(3), "sine"), backend=backend, graphs=1)


def test_tuple_unpacking_with_star(backend):
    def fn(xs):
        first, *middle, last = xs
        return first + last, len(middle), torch.stack(middle).sum(0)

    check_compiled(fn, lambda: ([torch.randn(2) for _ in range(5)],), backend=backend, graphs=1)


def test_star_arguments_into_a_torch_call(backend):
    def fn(x):
        sizes = [x.shape[1], x.shape[0]]
        return x.reshape(*sizes) * 2

    check_compiled(fn, lambda: (torch.randn(2, 6),), backend=backend, graphs=1)


def test_list_comprehension_over_tensors(backend):
    def fn(xs):
        return [x * i for i, x in enumerate(xs) if i != 1]

    check_compiled(fn, lambda: ([torch.randn(3) for _ in range(4)],), backend=backend, graphs=1)


def test_dict_comprehension_and_items_iteration(backend):
    def fn(d):
        doubled = {k: v * 2 for k, v in d.items()}
        return {k + "_sum": v.sum() for k, v in doubled.items()}

    check_compiled(
        fn, lambda: ({"a": torch.randn(3), "b": torch.randn(2)},), backend=backend, graphs=1
    )


def test_generator_expression_consumed_by_sum(backend):
    def fn(x):
        return sum(x * i for i in range(1, 4))

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=1)


def test_set_of_python_values(backend):
    def fn(x, dims):
        unique = sorted(set(dims) | {0})
        return x.sum(dim=unique), len(unique)

    check_compiled(fn, lambda: (torch.randn(2, 3, 4), [2, 2, 1]), backend=backend, graphs=1)


def test_for_over_a_tuple_of_tensors(backend):
    def fn(x, y, z):
        acc = torch.zeros(3)
        for t in (x, y, z):
            acc = acc * 0.5 + t
        return acc

    check_compiled(
        fn, lambda: (torch.randn(3), torch.randn(3), torch.randn(3)), backend=backend, graphs=1
    )


def test_while_loop_with_python_counter_is_unrolled(backend):
    def fn(x):
        i = 0
        while i < 4:
            x = x * 0.5 + i
            i += 1
        return x

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_while_loop_with_break_and_continue(backend):
    def fn(x):
        i = 0
        while True:
            i += 1
            if i % 2 == 0:
                continue
            x = x + i
            if i > 5:
                break
        return x

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_range_with_negative_step_and_reversed(backend):
    def fn(xs):
        out = xs[0]
        for i in range(len(xs) - 1, 0, -2):
            out = out + xs[i]
        for t in reversed(xs):
            out = out * 0.9 + t
        return out

    check_compiled(fn, lambda: ([torch.randn(2) for _ in range(5)],), backend=backend, graphs=1)


@pytest.mark.parametrize("flag", [True, False])
def test_if_on_a_python_bool_argument(backend, flag):
    def fn(x, use_sin):
        if use_sin:
            return x.sin()
        return x.cos()

    check_compiled(fn, lambda: (torch.randn(4), flag), backend=backend, graphs=1)


@pytest.mark.parametrize("rows", [2, 5])
def test_if_on_tensor_shape(backend, rows):
    def fn(x):
        if x.shape[0] > 3:
            return x.sum(0)
        return x.mean(0)

    check_compiled(fn, lambda: (torch.randn(rows, 3),), backend=backend, graphs=1)


@pytest.mark.parametrize("shape", [(4,), (2, 2)])
def test_if_on_tensor_dim(backend, shape):
    def fn(x):
        if x.dim() == 1:
            return x.unsqueeze(0)
        return x.flatten()

    check_compiled(fn, lambda: (torch.randn(*shape),), backend=backend, graphs=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_if_on_tensor_dtype(backend, dtype):
    def fn(x):
        if x.dtype == torch.float64:
            return x.float() * 2
        return x - 1

    check_compiled(fn, lambda: (torch.randn(3, dtype=dtype),), backend=backend, graphs=1)


def test_if_on_tensor_device(backend):
    def fn(x):
        if x.device.type == "cpu" and x.is_cuda is False:
            return x + 1
        return x - 1

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


@pytest.mark.parametrize("requires_grad", [True, False])
def test_if_on_requires_grad(backend, requires_grad):
    def fn(x):
        if x.requires_grad:
            return x * 2
        return x * 3

    check_compiled(
        fn,
        lambda: (torch.randn(3, requires_grad=requires_grad),),
        backend=backend,
        graphs=1,
    )


@pytest.mark.parametrize("other", [None, 2.5, "tensor"])
def test_isinstance_and_is_none_dispatch(backend, other):
    def fn(x, y):
        if y is None:
            return x * 1
        if isinstance(y, torch.Tensor):
            return x + y
        if isinstance(y, (int, float)):
            return x * y
        return x

    def make_args():
        y = torch.randn(3) if other == "tensor" else other
        return torch.randn(3), y

    check_compiled(fn, make_args, backend=backend, graphs=1)


def test_len_enumerate_and_zip(backend):
    def fn(xs, ws):
        out = torch.zeros(2)
        for i, (x, w) in enumerate(zip(xs, ws)):
            out = out + x * w / len(xs) + i
        return out

    check_compiled(
        fn,
        lambda: ([torch.randn(2) for _ in range(3)], [0.5, 1.5, -1.0]),
        backend=backend,
        graphs=1,
    )


def test_min_max_abs_round_of_python_numbers(backend):
    def fn(x, a, b):
        lo, hi = min(a, b), max(a, b, 1)
        return x.clamp(lo, hi) * abs(a - b) + round(a * 10) / 10

    check_compiled(fn, lambda: (torch.randn(5), -0.25, 0.75), backend=backend, graphs=1)


@pytest.mark.parametrize("flags", [[True, True], [True, False], [False, False]])
def test_any_and_all_over_python_values(backend, flags):
    def fn(x, flags):
        if all(flags):
            return x + 1
        if any(flags):
            return x + 2
        return x + 3

    check_compiled(fn, lambda: (torch.randn(2), list(flags)), backend=backend, graphs=1)


def test_math_and_operator_functions(backend):
    def fn(x, n):
        scale = math.sqrt(n) + math.log(n) + math.floor(2.7)
        y = operator.mul(x, scale)
        return operator.add(y, operator.getitem([1.0, 2.0], 1))

    check_compiled(fn, lambda: (torch.randn(3), 4), backend=backend, graphs=1)


def test_dict_get_with_default_and_membership(backend):
    def fn(x, opts):
        y = x * opts.get("scale", 1.0)
        if "shift" in opts:
            y = y + opts["shift"]
        if "missing" not in opts:
            y = y * 2
        return y

    check_compiled(fn, lambda: (torch.randn(3), {"scale": 3.0}), backend=backend, graphs=1)


def test_python_list_slicing_and_negative_indexing(backend):
    def fn(xs):
        head, tail = xs[:2], xs[-2:]
        return torch.stack((head + tail)[::-1]), xs[-1] - xs[0]

    check_compiled(fn, lambda: ([torch.randn(2) for _ in range(5)],), backend=backend, graphs=1)


def test_conditional_expression_and_chained_comparison(backend):
    def fn(x, k):
        factor = 2.0 if 0 < k <= 3 else -1.0
        return x * factor if k != 2 else x - factor

    check_compiled(fn, lambda: (torch.randn(3), 3), backend=backend, graphs=1)


def test_boolean_short_circuit_on_python_values(backend):
    def fn(x, opts):
        use = opts is not None and opts.get("double", False)
        name = (opts and opts.get("name")) or "default"
        y = x * 2 if use else x
        return y + len(name)

    check_compiled(fn, lambda: (torch.randn(3), {"double": True}), backend=backend, graphs=1)


def test_walrus_and_divmod(backend):
    def fn(x):
        if (n := x.shape[0]) > 2:
            q, r = divmod(n, 3)
            return x * q + r
        return x

    check_compiled(fn, lambda: (torch.randn(7),), backend=backend, graphs=1)


def test_int_float_and_bool_conversions(backend):
    def fn(x):
        n = int(x.shape[0] / 2)
        f = float(n) + 0.5
        flag = bool(n)
        return x[:n] * f if flag else x

    check_compiled(fn, lambda: (torch.randn(6),), backend=backend, graphs=1)


def test_namedtuple_argument_fields(backend):
    def fn(p):
        return p.x * p.y, p[0] - p[1]

    check_compiled(fn, lambda: (Point(torch.randn(3), torch.randn(3)),), backend=backend, graphs=1)


def test_namedtuple_built_and_unpacked_inside(backend):
    def fn(x):
        p = Point(x.sin(), x.cos())
        a, b = p
        return p._replace(x=a + b).x

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_dataclass_argument_fields(backend):
    def fn(x, cfg):
        y = x * cfg.scale + cfg.shift
        return torch.relu(y) if cfg.use_relu else y

    check_compiled(fn, lambda: (torch.randn(4), Config(2.0, -0.5, True)), backend=backend, graphs=1)


def test_dataclass_instance_created_inside(backend):
    def fn(x):
        cfg = Config(scale=x.shape[0] * 1.0, shift=1.0, use_relu=False)
        return x * cfg.scale - cfg.shift

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=1)


def test_lambda_and_nested_function_defined_inside(backend):
    def fn(x):
        def double(t):
            return t * 2

        square = lambda t: t * t  # noqa: E731
        return double(square(x)) + square(double(x))

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_map_and_filter_over_tensors(backend):
    def fn(xs):
        kept = filter(lambda t: t.shape[0] > 1, xs)
        return list(map(torch.sin, kept))

    check_compiled(
        fn, lambda: ([torch.randn(1), torch.randn(3), torch.randn(2)],), backend=backend, graphs=1
    )


def test_sorted_with_key_over_python_values(backend):
    def fn(x, weights):
        order = sorted(range(len(weights)), key=lambda i: -weights[i])
        return x[order[0]] * weights[order[0]] + x[order[-1]]

    check_compiled(fn, lambda: (torch.randn(4, 2), [0.3, 0.9, 0.1, 0.5]), backend=backend, graphs=1)
