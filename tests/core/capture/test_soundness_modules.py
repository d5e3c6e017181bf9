"""Issue 14, items 5 and 9: instances of one module class share compiled work, and what the
program drops is freed.

A module is guarded by its type and ``training``, not its identity; whatever the trace
reads from it (attributes, submodules, parameters as graph inputs, hooks, member names) is
guarded through its own source. So N blocks compiled one by one capture one frame, and an
instance that differs in what the graph reads gets its own entry. Each case compares the
compiled module with an eager deep copy: outputs and gradients.
"""

import copy
import gc
import weakref

import pytest
import torch
from torch import nn

import torchkiln
from torchkiln.capture.dispatch import frame_cache


class Block(nn.Module):
    """A small transformer-style block: Linear, LayerNorm, GELU, Linear, residual."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.norm = nn.LayerNorm(2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.norm(self.fc1(x))))


def frames() -> int:
    return torchkiln.counters["frames"]["total"]


def check(module: nn.Module, backend: str, *shape: int, dtype=torch.float32) -> nn.Module:
    """Compile ``module``, call it on a fresh input, compare outputs and gradients with an
    eager deep copy; returns the compiled module."""
    eager = copy.deepcopy(module)
    compiled = torchkiln.compile(module, backend=backend)
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    out, expected = compiled(x), eager(x_eager)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x.grad, x_eager.grad)
    for (name, p), (_, q) in zip(module.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=f"gradient of {name}")
    return compiled


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_twelve_instances_share_one_frame_and_a_thirteenth_that_differs_recompiles(backend):
    for _ in range(12):
        check(Block(), backend, 2, 8)
    assert frames() == 1
    assert not torchkiln.counters["eager_fallback"]
    check(Block(6), backend, 2, 6)  # other shapes
    assert frames() == 2
    check(Block().double(), backend, 2, 8, dtype=torch.float64)
    assert frames() == 3
    check(Block().eval(), backend, 2, 8)
    assert frames() == 4
    check(Block(), backend, 2, 8)  # the first entry still serves a plain one
    assert frames() == 4


class Scaled(nn.Module):
    scale = 2.0

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x) * self.scale + getattr(self, "offset", 0.0)
        if hasattr(self, "extra"):
            y = self.extra(y)
        return y


class Forwarding(nn.Module):
    """Reads what it lacks from its inner module (as adapter wrappers do)."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)

    def forward(self, x):
        return self.inner(x) * self.out_features + hasattr(self, "in_features")


def test_attributes_a_custom_getattr_answers_are_not_taken_as_missing():
    check(Forwarding(), "eager", 2, 4)
    before = frames()
    check(Forwarding(), "eager", 2, 4)
    assert frames() == before and not torchkiln.counters["recompiles"]


class Tripled(Scaled):
    scale = 3.0


def test_an_instance_with_an_extra_attribute_or_submodule_gets_its_own_result():
    check(Scaled(), "eager", 2, 4)
    check(Scaled(), "eager", 2, 4)
    assert frames() == 1
    with_offset = Scaled()
    with_offset.offset = 1.5
    check(with_offset, "eager", 2, 4)
    with_extra = Scaled()
    with_extra.extra = nn.Linear(4, 4)
    check(with_extra, "eager", 2, 4)
    assert frames() == 3


def test_class_attributes_are_read_as_python_reads_them():
    module = Scaled()
    compiled = check(module, "eager", 2, 4)
    check(Tripled(), "eager", 2, 4)  # another class: another value
    x = torch.randn(2, 4)
    try:
        Scaled.scale = 4.0
        torch.testing.assert_close(compiled(x), module.lin(x) * 4.0)
    finally:
        Scaled.scale = 2.0
    module.scale = 5.0  # an instance attribute hides the class's
    torch.testing.assert_close(compiled(x), module.lin(x) * 5.0)


def test_hooks_and_a_replaced_forward_on_one_instance_are_honoured():
    check(Scaled(), "eager", 2, 4)
    hooked = Scaled()
    hooked.lin.register_forward_hook(lambda mod, args, out: out * 10)
    check(hooked, "eager", 2, 4)
    patched = Scaled()
    patched.lin.forward = lambda x: x - 1  # an instance attribute: ``__call__`` runs it
    check(patched, "eager", 2, 4)
    before = frames()
    check(Scaled(), "eager", 2, 4)  # a plain one still shares the first entry
    assert frames() == before


class Swappable(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).sum(-1)


@pytest.mark.parametrize(
    "replacement", [lambda: nn.Linear(4, 6), lambda: nn.Identity()], ids=["size", "class"]
)
def test_a_submodule_swapped_on_one_of_two_sharing_instances_is_caught(replacement):
    first, second = Swappable(), Swappable()
    compiled_first = check(first, "eager", 2, 4)
    compiled_second = check(second, "eager", 2, 4)
    assert frames() == 1
    second.lin = replacement()
    x = torch.randn(2, 4, requires_grad=True)
    torch.testing.assert_close(compiled_second(x), second(x))
    torch.testing.assert_close(compiled_first(x), first(x))
    assert frames() == 2


class Pair(nn.Module):
    def __init__(self, tied: bool):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a if tied else nn.Linear(4, 4)

    def forward(self, x):
        return self.a(x) * 2 if self.a is self.b else self.a(x) + self.b(x)


def test_is_between_submodules_is_guarded():
    check(Pair(tied=False), "eager", 2, 4)
    check(Pair(tied=False), "eager", 2, 4)
    assert frames() == 1
    check(Pair(tied=True), "eager", 2, 4)
    assert frames() == 2


class Weights(nn.Module):
    def __init__(self, tied: bool):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        if tied:
            self.b.weight = self.a.weight

    def forward(self, x):
        return x * sum(p.sum() for p in self.parameters())  # each shared parameter once


def test_tied_parameters_change_what_parameters_yields():
    check(Weights(tied=False), "eager", 2, 4)
    check(Weights(tied=False), "eager", 2, 4)
    assert frames() == 1
    check(Weights(tied=True), "eager", 2, 4)
    assert frames() == 2


class Sliced(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers[1:]:  # a ModuleList slice numbers its members from 0
            x = layer(x)
        return x


def test_a_module_list_slice_calls_the_sliced_layers():
    check(Sliced(), "eager", 2, 4)


class BuildsOne(nn.Module):
    def forward(self, x):
        return nn.GELU()(x) + 1


def test_a_module_made_inside_forward_does_not_recompile_on_every_call():
    compiled = check(BuildsOne(), "eager", 2, 4)
    after_first = frames()
    for _ in range(4):
        x = torch.randn(2, 4, requires_grad=True)
        torch.testing.assert_close(compiled(x), nn.functional.gelu(x) + 1)
    assert frames() == after_first
    assert not torchkiln.counters["recompiles"]


# -- lifetime --------------------------------------------------------------------------


def make_closure(module: nn.Module):
    scale = torch.randn(4)

    def step(x):
        return module(x) * scale

    return step, scale


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_dropped_compiled_module_and_closure_are_freed(backend):
    class Local(nn.Module):  # held by the type guard until reset
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            x = self.lin(x)
            print(end="")  # a graph break: its reason must not hold the capture's frames
            return torch.relu(x)

    module = Local()
    compiled = torchkiln.compile(module, backend=backend)
    x = torch.randn(2, 4, requires_grad=True)
    compiled(x).sum().backward()
    inner = Local()
    step, scale = make_closure(inner)
    compiled_step = torchkiln.compile(step, backend=backend)
    torch.testing.assert_close(compiled_step(x), step(x))
    refs = [weakref.ref(o) for o in (module, module.lin.weight, step, inner, scale)]
    del module, compiled, inner, step, scale, compiled_step
    gc.collect()
    assert [ref() for ref in refs] == [None] * len(refs)
    local_class = weakref.ref(Local)
    del Local
    torchkiln.reset()
    gc.collect()
    assert local_class() is None


class WithActivation(nn.Module):
    """A per-instance function that reads the instance through its closure."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = lambda t: torch.tanh(t) * self.lin.out_features

    def forward(self, x):
        return self.act(self.lin(x))


def test_a_module_whose_inlined_closure_holds_it_is_freed_and_its_entry_dropped():
    module = WithActivation()
    check(module, "eager", 2, 4)
    cache = frame_cache(WithActivation.forward.__code__)
    assert len(cache.all_entries()) == 1  # guards the lambda by identity
    ref = weakref.ref(module)
    del module
    gc.collect()
    assert ref() is None
    assert cache.all_entries() == []  # dropped with the lambda: its id may be reused
    check(WithActivation(), "eager", 2, 4)


def test_a_function_guarded_by_identity_is_held_weakly():
    def apply(x, fn):
        return fn(x) + 1

    compiled = torchkiln.compile(apply, backend="eager")
    double = lambda t: t * 2  # noqa: E731
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, double), x * 2 + 1)
    ref = weakref.ref(double)
    del double
    gc.collect()
    assert ref() is None
    assert frame_cache(apply.__code__).all_entries() == []
    torch.testing.assert_close(compiled(x, lambda t: t * 3), x * 3 + 1)


def test_a_closure_called_at_a_graph_break_is_freed():
    def outer(x, fn):
        return fn(x + 1) * 2  # fn breaks the graph: it is called through a dispatcher

    compiled = torchkiln.compile(outer, backend="eager")
    x = torch.randn(3)
    payload = torch.randn(3)

    def make(scale):
        def fn(t):
            t = t * scale
            print(end="")
            return t + payload

        return fn

    for scale in (2.0, 3.0):
        fn = make(scale)
        torch.testing.assert_close(compiled(x, fn), outer(x, fn))
    ref = weakref.ref(fn)
    del fn
    gc.collect()
    assert ref() is None
