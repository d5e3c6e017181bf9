"""Spec (issue 3): calls to user Python code are inlined into the caller's graph.

Functions, methods, closures, partials, default/keyword-only/variadic
arguments and recursion with a Python base case all end up in exactly one
graph together with the caller.
"""

import functools

import torch

import torchkiln
from kiln_testing import RecordingBackend, ScaleRegistry, check_compiled

SCALE = 3.0


def helper_add_scale(x, y):
    return x + y * SCALE


def helper_with_defaults(x, alpha=2.0, *, beta=1.0, bias=None):
    out = x * alpha + beta
    if bias is not None:
        out = out + bias
    return out


def helper_varargs(*tensors, **weights):
    out = tensors[0] * 0
    for i, t in enumerate(tensors):
        out = out + t * weights.get(f"w{i}", 1.0)
    return out


def power_sum(x, n):
    if n == 0:
        return x * 0
    return x**n + power_sum(x, n - 1)


def is_even_depth(x, n):
    return x if n == 0 else is_odd_depth(x + 1, n - 1)


def is_odd_depth(x, n):
    return x * 2 if n == 0 else is_even_depth(x - 1, n - 1)


def make_scaler(factor):
    def scale(t):
        return t * factor

    return scale


def make_tensor_closure(offset):
    def shift(t):
        return t + offset

    return shift


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) + 1

    return wrapper


@logged
def decorated_square(x):
    return x * x


class Affine:
    """A plain (non-Module) Python object with tensor attributes."""

    def __init__(self, w, b):
        self.w = w
        self.b = b

    def apply(self, x):
        return x * self.w + self.b

    def __call__(self, x):
        return self.apply(x).relu()

    @property
    def norm(self):
        return self.w.norm()

    @staticmethod
    def twice(x):
        return x * 2

    @classmethod
    def identity_like(cls, x):
        return cls(torch.ones_like(x), torch.zeros_like(x))


class ShiftedAffine(Affine):
    def apply(self, x):
        return super().apply(x) - 1


def test_call_to_a_module_level_function(backend):
    def fn(x, y):
        return helper_add_scale(x, y).sin()

    check_compiled(fn, lambda: (torch.randn(3), torch.randn(3)), backend=backend, graphs=1)


def test_default_and_keyword_only_arguments(backend):
    def fn(x, b):
        return helper_with_defaults(x) + helper_with_defaults(x, 0.5, beta=-1.0, bias=b)

    check_compiled(fn, lambda: (torch.randn(3), torch.randn(3)), backend=backend, graphs=1)


def test_star_args_and_star_star_kwargs(backend):
    def fn(a, b, c):
        return helper_varargs(a, b, c, w0=2.0, w2=-1.0)

    check_compiled(
        fn, lambda: (torch.randn(2), torch.randn(2), torch.randn(2)), backend=backend, graphs=1
    )


def test_forwarding_args_and_kwargs_through_a_wrapper(backend):
    def forward_all(*args, **kwargs):
        return helper_with_defaults(*args, **kwargs)

    def fn(x, b):
        return forward_all(x, 3.0, bias=b, beta=0.0)

    check_compiled(fn, lambda: (torch.randn(3), torch.randn(3)), backend=backend, graphs=1)


def test_recursion_with_a_python_base_case(backend):
    def fn(x):
        return power_sum(x, 3)

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=1)


def test_mutual_recursion(backend):
    def fn(x):
        return is_even_depth(x, 3)

    check_compiled(fn, lambda: (torch.randn(4),), backend=backend, graphs=1)


def test_closure_over_a_python_value(backend):
    scale_by_3 = make_scaler(3.0)

    def fn(x):
        return scale_by_3(x) + 1

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_closure_over_a_tensor(backend):
    shift = make_tensor_closure(torch.randn(3))

    def fn(x):
        return shift(x).cos()

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_compiled_function_is_itself_a_closure(backend):
    weight = torch.randn(3)
    bias = 0.5

    def fn(x):
        return x * weight + bias

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_nested_closures_three_levels(backend):
    def outer(a):
        def middle(b):
            def inner(t):
                return t * a + b

            return inner

        return middle

    f = outer(2.0)(-1.0)

    def fn(x):
        return f(x) * f(x + 1)

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_nonlocal_counter_inside_the_compiled_function(backend):
    def fn(x):
        count = 0

        def bump(t):
            nonlocal count
            count += 1
            return t * count

        return bump(x) + bump(x), count

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_functools_partial_with_positional_and_keyword(backend):
    partial_fn = functools.partial(helper_with_defaults, alpha=-2.0, beta=0.25)

    def fn(x, b):
        return partial_fn(x, bias=b)

    check_compiled(fn, lambda: (torch.randn(3), torch.randn(3)), backend=backend, graphs=1)


def test_partial_of_a_torch_function(backend):
    softmax_last = functools.partial(torch.softmax, dim=-1)

    def fn(x):
        return softmax_last(x) * 2

    check_compiled(fn, lambda: (torch.randn(2, 5),), backend=backend, graphs=1)


def test_function_passed_as_an_argument(backend):
    def fn(x, activation):
        return activation(x) + 1

    check_compiled(fn, lambda: (torch.randn(4), torch.tanh), backend=backend, graphs=1)


def test_functions_looked_up_in_a_dict(backend):
    table = {"sin": torch.sin, "double": lambda t: t * 2, "helper": helper_add_scale}

    def fn(x):
        return table["helper"](table["sin"](x), table["double"](x))

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_decorated_function_with_functools_wraps(backend):
    def fn(x):
        return decorated_square(x) * 3

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_method_call_on_a_plain_object(backend):
    def fn(obj, x):
        return obj.apply(x) * 2

    check_compiled(
        fn,
        lambda: (Affine(torch.randn(3), torch.randn(3)), torch.randn(3)),
        backend=backend,
        graphs=1,
    )


def test_dunder_call_property_staticmethod_classmethod(backend):
    def fn(obj, x):
        ident = Affine.identity_like(x)
        return obj(x) + obj.norm + Affine.twice(x) + ident.apply(x)

    check_compiled(
        fn,
        lambda: (Affine(torch.randn(3), torch.randn(3)), torch.randn(3)),
        backend=backend,
        graphs=1,
    )


def test_overridden_method_calling_super(backend):
    def fn(obj, x):
        return obj.apply(x)

    check_compiled(
        fn,
        lambda: (ShiftedAffine(torch.randn(3), torch.randn(3)), torch.randn(3)),
        backend=backend,
        graphs=1,
    )


def test_bound_method_stored_in_a_variable(backend):
    def fn(obj, x):
        method = obj.apply
        return method(method(x))

    check_compiled(
        fn,
        lambda: (Affine(torch.randn(3), torch.randn(3)), torch.randn(3)),
        backend=backend,
        graphs=1,
    )


def test_deep_chain_of_calls(backend):
    def level3(t):
        return t.sin()

    def level2(t):
        return level3(t) * 2

    def level1(t):
        return level2(t) + level3(t)

    def fn(x):
        return level1(x) - level2(x)

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_inlined_function_returning_multiple_values(backend):
    def split_stats(t):
        return t.mean(), t.std(), t.shape[0]

    def fn(x):
        mean, std, n = split_stats(x)
        return (x - mean) / std * n

    check_compiled(fn, lambda: (torch.randn(6),), backend=backend, graphs=1)


def test_decorator_usage_of_compile(backend):
    @torchkiln.compile(backend=backend)
    def compiled(x):
        return helper_add_scale(x, x).cos()

    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), helper_add_scale(x, x).cos())
    assert backend.graph_count == 1, f"expected 1 graph, got {backend.graph_count}"


SCALES = ScaleRegistry({"2": 3.0})


def test_super_lookup_in_a_dict_subclass_is_answered_in_the_graph(backend):
    def fn(x):
        return x * SCALES.get(2) + SCALES.get(5)

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


class KeyCounter(dict):
    def count(self):
        return len(super().keys())  # a C method that is not a lookup: acts on the items


COUNTER = KeyCounter(a=1, b=2)


def test_super_call_of_a_c_method_is_bound_to_the_object(backend):
    def fn(x):
        return x * COUNTER.count()

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_lookup_in_a_registry_recompiles_when_the_registry_changes(backend):
    registry = ScaleRegistry({"2": 3.0})

    def fn(x):
        return x * registry.get(2)

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 3.0)
    registry["2"] = 5.0
    torch.testing.assert_close(compiled(x), x * 5.0)
    assert backend.graph_count == 2


class CheckedRegistry(dict):
    """Like transformers' AttentionInterface: a graph break, then ``super().get``."""

    def lookup(self, key, default):
        print("looking up", key)  # a graph break in this frame
        return super().get(key, default)


CHECKED = CheckedRegistry({"relu": torch.relu})


def test_zero_argument_super_works_in_a_resume_function(backend, capsys):
    def fn(x):
        return CHECKED.lookup("relu", torch.tanh)(x) + 1

    check_compiled(
        fn, lambda: (torch.randn(3),), backend=backend, graphs=1, breaks=2, capsys=capsys
    )


def config_defaults(fn):
    """A decorator that reads the wrapped function's signature, as transformers' do."""

    @functools.wraps(fn)
    def wrapper(x, *args):
        scale = 2.0 if "scale" in fn.__code__.co_varnames else 1.0
        return fn(x * scale, *args)

    return wrapper


@config_defaults
def scaled_sin(x, scale=None):
    return x.sin()


def test_reading_a_functions_code_signature_stays_in_the_graph(backend):
    check_compiled(scaled_sin, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_torch_compiler_is_compiling_is_true_while_captured(backend):
    def fn(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    assert backend.graph_count == 1


class Aliases(dict):
    pass


ALIASES = Aliases(relu="relu")


def test_get_on_a_dict_subclass_calls_the_bound_method(backend):
    def fn(x):
        return x * len(ALIASES.get("relu"))

    check_compiled(fn, lambda: (torch.randn(3),), backend=backend, graphs=1)


def test_a_lambda_defined_in_a_torch_module_is_traced_through():
    """Like OpInfo's ``where``, a lambda of ``torch.testing._internal`` (not imported here: it
    patches torch on import): as a graph node it would be called by a name its module does
    not have (``common_methods_invocations.op``)."""
    where = eval(  # a lambda whose module is torch's
        "lambda self, condition, other, **kwargs: torch.where(condition, self, other, **kwargs)",
        {"torch": torch, "__name__": "torch.testing._internal.common_methods_invocations"},
    )
    backend = RecordingBackend()
    check_compiled(
        lambda x, c, y: where(x, c, y) * 2,
        lambda: (torch.randn(4, 5), torch.rand(4, 5) > 0.5, torch.randn(4, 5)),
        backend=backend,
        graphs=1,
        fullgraph=True,
    )
    (gm,) = backend.graphs
    assert torch.where in {n.target for n in gm.graph.nodes}
    gm.recompile()  # the generated code names every target it calls
