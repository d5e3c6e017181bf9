"""Classes patched at run time (issue #14): a method or class attribute read from a class is
guarded through the instance and the class, so rebinding either recompiles."""

import pytest
import torch
from torch.testing import assert_close

import torchkiln

BACKENDS = ["eager", "aot_eager"]


def make_scaler_class():
    class Scaler:
        scale = 2.0

        def apply(self, x):
            return x * self.scale + self.shift

        @property
        def shift(self):
            return 1.0

    return Scaler


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_object_class_attribute_and_methods(backend):
    Scaler = make_scaler_class()
    obj = Scaler()

    def fn(x):
        return obj.apply(x)

    compiled = torchkiln.compile(fn, backend=backend)
    x = torch.randn(3)
    assert_close(compiled(x), fn(x))
    obj.scale = 3.0  # an instance attribute hides the class's
    assert_close(compiled(x), fn(x))
    del obj.scale
    Scaler.scale = 5.0  # the class attribute changes
    assert_close(compiled(x), fn(x))
    Scaler.shift = property(lambda self: -4.0)  # another property on the class
    assert_close(compiled(x), fn(x))
    Scaler.apply = lambda self, x: x - 1  # the method is patched on the class
    assert_close(compiled(x), fn(x))
    obj.apply = lambda x: x + 100  # and hidden by an instance attribute
    assert_close(compiled(x), fn(x))


def make_module_class():
    class Block(torch.nn.Module):
        offset = 1.0

        def forward(self, x):
            return self.inner(x) + self.offset * self.gain

        def inner(self, x):
            return x * 2

        @property
        def gain(self):
            return 1.0

    return Block


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_class_patched_after_compiling(backend):
    Block = make_module_class()
    m = Block()
    compiled = torchkiln.compile(m, backend=backend)
    x = torch.randn(3)
    assert_close(compiled(x), m(x))
    Block.inner = lambda self, x: x * 7
    assert_close(compiled(x), m(x))
    Block.offset = 4.0
    assert_close(compiled(x), m(x))
    Block.gain = property(lambda self: -2.0)  # another property on the class
    assert_close(compiled(x), m(x))
    Block.forward = lambda self, x: x - 3
    assert_close(compiled(x), m(x))
    m.forward = lambda x: x + 10  # on the original module, not through the compiled one
    assert_close(compiled(x), m(x))


def make_class_built_in_frame():
    class Doubler:
        offset = 1.0

        def __init__(self, k):
            self.k = k

        def apply(self, x):
            return x * self.k + self.offset

        def __add__(self, other):
            return self.k + other

        @property
        def half(self):
            return self.k / 2

    return Doubler


@pytest.mark.parametrize("backend", BACKENDS)
def test_class_of_an_object_the_frame_makes_patched_after_compiling(backend):
    """An object made inside the frame has no source: its class's members are guarded
    through the class, so patching the class recompiles."""
    Doubler = make_class_built_in_frame()

    def fn(x):
        d = Doubler(2)
        return d.apply(x) + d.half + (d + 1), hasattr(d, "extra")

    compiled = torchkiln.compile(fn, backend=backend, fullgraph=True)
    x = torch.randn(3)
    assert_close(compiled(x), fn(x))
    Doubler.offset = -5.0  # a class attribute
    assert_close(compiled(x), fn(x))
    Doubler.apply = lambda self, x: x - self.k  # a method
    assert_close(compiled(x), fn(x))
    Doubler.half = property(lambda self: -self.k)  # a property
    assert_close(compiled(x), fn(x))
    Doubler.__add__ = lambda self, other: 100 + other  # an operator
    assert_close(compiled(x), fn(x))
    Doubler.extra = 1  # a name the object lacked
    assert_close(compiled(x), fn(x))
