"""Spec (issue 3): ``nn.Module`` calls are inlined; compiling a module compiles its ``forward``.

Each case compiles a module (or a function calling one) and compares it with
an identical eager copy: outputs, parameter gradients and module state
(buffers, Python attributes) after each call, and checks that one graph was
compiled for all calls.
"""

import copy
import functools

import pytest
import torch
from torch import nn

import torchkiln
from kiln_testing import assert_graph_count, assert_same, check_compiled


def check_module(
    mod: nn.Module,
    make_input,
    *,
    backend,
    graphs: int = 1,
    calls: int = 2,
    grads: bool = False,
) -> None:
    """Compile ``mod``; compare it with an eager deep copy on ``calls`` fresh inputs.

    Outputs, module state (``state_dict`` and Python attributes) and, with
    ``grads``, parameter gradients must match; ``graphs`` graphs in total.
    """
    eager = copy.deepcopy(mod)
    compiled = torchkiln.compile(mod, backend=backend)
    for call in range(calls):
        args = make_input()
        expected = eager(*copy.deepcopy(args))
        actual = compiled(*copy.deepcopy(args))
        assert_same(actual, expected)
        assert_same(mod.state_dict(), eager.state_dict())
        if grads:
            expected.sum().backward()
            actual.sum().backward()
            for (name, p), (_, q) in zip(mod.named_parameters(), eager.named_parameters()):
                torch.testing.assert_close(p.grad, q.grad, msg=f"gradient of {name}, call {call}")
        assert_graph_count(backend, graphs, f"after call {call}")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Residual(nn.Module):
    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) * (i + 1)
        return x


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, x):
        return {name: head(x).sum(-1) for name, head in self.heads.items()}


class RawParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("offset", torch.randn(4))
        self.scale = 0.5

    def forward(self, x):
        return (x @ self.weight + self.offset) * self.scale


class SharedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.lin(x).tanh())


class ParamLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3, bias=False)

    def forward(self, x):
        total = x.sum() * 0
        for name, p in self.named_parameters():
            total = total + p.sum() * len(name)
        return x * total


class ByName(nn.Module):
    def __init__(self):
        super().__init__()
        self.block0 = nn.Linear(4, 4)
        self.block1 = nn.Linear(4, 4)

    def forward(self, x):
        for i in range(2):
            x = getattr(self, f"block{i}")(x)
        return x


class Recorder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.seen_rows = None
        self.last_output = None

    def forward(self, x):
        out = self.lin(x)
        self.seen_rows = x.shape[0]
        self.last_output = out.detach()
        return out


def test_linear_module(backend):
    check_module(nn.Linear(4, 3), lambda: (torch.randn(2, 4),), backend=backend, grads=True)


def test_nested_custom_modules(backend):
    check_module(
        Residual(Residual(SharedTwice())), lambda: (torch.randn(5, 4),), backend=backend, grads=True
    )


def test_mlp_parameter_gradients_match_eager(backend):
    check_module(MLP(), lambda: (torch.randn(5, 4),), backend=backend, grads=True)


def test_sequential_module(backend):
    seq = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.LayerNorm(6), nn.Linear(6, 2))
    check_module(seq, lambda: (torch.randn(3, 4),), backend=backend, grads=True)


def test_iteration_over_sequential_inside_a_function(backend):
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))

    def fn(x):
        outs = []
        for layer in seq:
            x = layer(x)
            outs.append(x.sum())
        return x, outs

    check_compiled(fn, lambda: (torch.randn(2, 4),), backend=backend, graphs=1)


def test_sequential_indexing_slicing_and_len(backend):
    seq = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Sigmoid())

    def fn(x):
        return seq[1:](seq[0](x)) * len(seq), seq[-1](x)

    check_compiled(fn, lambda: (torch.randn(2, 4),), backend=backend, graphs=1)


def test_module_list_iteration_with_enumerate(backend):
    check_module(Stack(), lambda: (torch.randn(2, 4),), backend=backend, grads=True)


def test_module_dict_items_return_a_dict(backend):
    check_module(Heads(), lambda: (torch.randn(2, 4),), backend=backend)


def test_raw_parameter_buffer_and_python_attribute(backend):
    check_module(RawParams(), lambda: (torch.randn(3, 4),), backend=backend, grads=True)


def test_submodule_called_twice(backend):
    check_module(SharedTwice(), lambda: (torch.randn(3, 4),), backend=backend, grads=True)


def test_named_parameters_iteration_in_forward(backend):
    check_module(ParamLoop(), lambda: (torch.randn(2, 3),), backend=backend)


def test_submodule_looked_up_with_getattr_and_a_formatted_name(backend):
    check_module(ByName(), lambda: (torch.randn(2, 4),), backend=backend)


def test_conv_batchnorm_in_eval_mode(backend):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval()
    check_module(model, lambda: (torch.randn(2, 3, 6, 6),), backend=backend)


def test_batchnorm_in_training_mode_updates_running_stats(backend):
    model = nn.BatchNorm1d(4).train()
    check_module(model, lambda: (torch.randn(8, 4),), backend=backend)


def test_dropout_in_eval_mode_is_identity(backend):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    check_module(model, lambda: (torch.randn(3, 4),), backend=backend)


def test_embedding_with_integer_indices(backend):
    model = nn.Embedding(10, 3)
    check_module(model, lambda: (torch.randint(0, 10, (2, 5)),), backend=backend)


def test_multihead_self_attention_returns_output_and_weights(backend):
    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            out, weights = self.attn(x, x, x)
            return out, weights

    check_module(SelfAttention().eval(), lambda: (torch.randn(2, 5, 8),), backend=backend)


def test_transformer_encoder_layer_in_eval_mode(backend):
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    check_module(layer.eval(), lambda: (torch.randn(2, 5, 8),), backend=backend)


def test_attribute_assignment_in_forward_is_replayed(backend):
    mod = Recorder()
    compiled = torchkiln.compile(mod, backend=backend)
    eager = copy.deepcopy(mod)
    for _ in range(2):
        x = torch.randn(2, 3)
        torch.testing.assert_close(compiled(x), eager(x))
        assert mod.seen_rows == eager.seen_rows == 2, f"seen_rows: {mod.seen_rows}"
        torch.testing.assert_close(mod.last_output, eager.last_output)
    assert_graph_count(backend, 1)


def test_compiled_module_shares_parameters_with_the_original(backend):
    mod = MLP()
    compiled = torchkiln.compile(mod, backend=backend)
    x = torch.randn(2, 4)
    compiled(x)
    with torch.no_grad():
        mod.fc1.weight.mul_(-1)
    torch.testing.assert_close(compiled(x), mod(x))
    assert_graph_count(backend, 1, "after an in-place update of a parameter")


def test_function_calling_a_global_module(backend):
    model = MLP()

    def fn(x, y):
        return model(x) - model(y)

    check_compiled(fn, lambda: (torch.randn(2, 4), torch.randn(2, 4)), backend=backend, graphs=1)


def test_module_method_other_than_forward(backend):
    class WithHelper(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def normalize(self, x):
            return x / x.norm(dim=-1, keepdim=True)

        def forward(self, x):
            return self.normalize(self.lin(x))

    check_module(WithHelper(), lambda: (torch.randn(3, 4),), backend=backend, grads=True)


def test_module_training_flag_read_in_forward(backend):
    class Flagged(nn.Module):
        def forward(self, x):
            return x * 2 if self.training else x * 3

    check_module(Flagged().eval(), lambda: (torch.randn(3),), backend=backend)


def logged(fn):
    """A decorator whose wrapper takes ``*args``: a bound ``self`` lands in ``args``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class LoggedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(3))

    @logged
    def forward(self, x):
        return x * self.scale


def test_module_forward_behind_a_star_args_decorator_is_compiled(backend):
    model = LoggedForward()
    compiled = torchkiln.compile(model, backend=backend)
    x = torch.randn(2, 3)
    assert_same(compiled(x), model(x))
    assert backend.graph_count == 1


# -- modules the frame makes ------------------------------------------------------------------


class Concat(nn.Module):
    """No ``__init__`` of its own; makes activations in its ``forward``."""

    def forward(self, x, y):
        return nn.ReLU()(torch.cat((x, y), dim=1)) * 2


def makes_modules(x, y):
    act = nn.Softmax(dim=-1)  # as some Hugging Face models write it
    gelu = nn.GELU(approximate="tanh")
    return act(x + y * 2), gelu(x), functools.partial(Concat(), y=y)(x)


def test_parameter_free_modules_made_in_the_frame(backend):
    def make():
        return torch.randn(4, 5, requires_grad=True), torch.randn(4, 5)

    check_compiled(makes_modules, make, backend=backend, graphs=1, grads=True, fullgraph=True)


def returns_a_module(x):
    m = nn.LeakyReLU(0.3)
    return m(x), m


def test_a_module_made_in_the_frame_and_returned_is_a_new_one_each_call():
    compiled = torchkiln.compile(returns_a_module, backend="eager", fullgraph=True)
    x = torch.randn(3)
    (out, first), (_, second) = compiled(x), compiled(x)
    torch.testing.assert_close(out, returns_a_module(x)[0])
    assert type(first) is nn.LeakyReLU and first.negative_slope == 0.3
    assert first is not second


def test_modules_that_make_parameters_or_run_their_own_init_break_the_graph():
    class Scaled(nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

        def forward(self, x):
            return x * self.k

    for make, why in (
        (lambda x: nn.Linear(3, 3)(x), "Linear module with parameters"),
        (lambda x: Scaled(2.0)(x), r"Scaled module inside the compiled function \(its own"),
    ):
        with pytest.raises(torchkiln.exc.Unsupported, match=why):
            torchkiln.compile(make, backend="eager", fullgraph=True)(torch.randn(3))
        compiled = torchkiln.compile(make, backend="eager")  # without fullgraph: eager there
        x = torch.randn(3)
        torch.manual_seed(0)
        actual = compiled(x)
        torch.manual_seed(0)
        torch.testing.assert_close(actual, make(x))


def test_the_class_of_a_module_made_in_the_frame_is_guarded(backend):
    def fn(x, y):
        return Concat()(x, y)

    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    torch.testing.assert_close(compiled(x, y), fn(x, y))
    original = Concat.forward
    Concat.forward = lambda self, x, y: x - y
    try:
        torch.testing.assert_close(compiled(x, y), x - y)
    finally:
        Concat.forward = original
