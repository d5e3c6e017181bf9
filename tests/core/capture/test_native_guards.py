"""The C++ guard program (``torchkiln.capture.native``, ``guard_program``) answers as the
Python guard expressions do.

A guard function folds every check of a shape the program knows (types, identities,
constants, missing keys, lengths, empty hooks, global state queries, plain tensors'
metadata) into one call of the program; its first-failure function keeps them one by one
in Python. Every case here is checked both ways: the program against the Python
expressions it replaces, and a compiled function under both against eager.
"""

from __future__ import annotations

import collections
import math
import os
import shutil

import pytest
import torch

import torchkiln
from torchkiln import config
from torchkiln.capture import dispatch, native
from torchkiln.capture.guard_program import OP_TENSOR, STEP_ARG, ProgramBuilder, translate
from torchkiln.capture.guards import NATIVE_GUARD

if shutil.which(os.environ.get("CXX", "g++")) is None:
    pytest.skip("needs a C++ compiler ($CXX, default g++)", allow_module_level=True)
checks = native.build()  # with a compiler, its error (if it can't be built) fails this module


@pytest.fixture(autouse=True)
def fresh_caches():
    torchkiln.reset()
    yield
    torchkiln.reset()


def tensor_program(spec):
    """A program checking its one argument against a tensor spec."""
    return checks.guard_program(1, [(-1, STEP_ARG, 0)], [(0, OP_TENSOR, spec)])


def python_checks(t, dtype, device, requires_grad, sizes, strides) -> bool:
    """What the guard function's Python expressions compute (they raise where C++ says False),
    and a strided layout: C++ checks it, where Python relies on ``stride()`` raising (which
    ``config.guard_strides = False`` leaves out)."""
    try:
        return (
            t.layout == torch.strided
            and t.dtype is dtype
            and t.device == device
            and t.requires_grad is requires_grad
            and t.shape == sizes
            and (strides is None or t.stride() == strides)
        )
    except Exception:
        return False


BASE = torch.randn(4, 6)
SPECS = [
    (torch.float32, torch.device("cpu"), False, (4, 6), (6, 1)),
    (torch.float32, torch.device("cpu"), False, (4, 6), None),
    (torch.float32, torch.device("cpu"), True, (4, 6), (6, 1)),
    (torch.float64, torch.device("cpu"), False, (4, 6), (6, 1)),
    (torch.float32, torch.device("meta"), False, (4, 6), (6, 1)),
    (torch.float32, torch.device("cpu"), False, (6, 4), (1, 6)),
    (torch.float32, torch.device("cpu"), False, (4, 6, 1), (6, 1, 1)),
    (torch.float32, torch.device("cpu"), False, (4,), (1,)),
]
TENSORS = [
    BASE,
    BASE.t(),
    BASE.t().contiguous().t(),
    BASE.double(),
    BASE.clone().requires_grad_(),
    BASE.clone().requires_grad_() * 1,  # not a leaf
    torch.nn.Parameter(BASE.clone()),
    torch.nn.Parameter(BASE.clone(), requires_grad=False),
    BASE.to("meta"),
    BASE.unsqueeze(-1),
    BASE[:, 0],
    BASE.to_sparse(),  # its strides raise in Python
    torch.zeros(0, 6),
]


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_tensor_checks_answer_as_the_python_checks(spec):
    check = tensor_program(spec)
    for i, t in enumerate(TENSORS):
        assert check(t) == python_checks(t, *spec), f"tensor {i}"


def test_a_program_takes_its_arguments_in_order_and_refuses_bad_specs():
    specs = [(t.dtype, t.device, t.requires_grad, tuple(t.shape), t.stride()) for t in TENSORS[:4]]
    nodes = [(-1, STEP_ARG, i) for i in range(4)]
    check = checks.guard_program(4, nodes, [(i, OP_TENSOR, spec) for i, spec in enumerate(specs)])
    assert check(*TENSORS[:4])
    assert not check(*TENSORS[1:5])
    assert not check(TENSORS[0], TENSORS[1], TENSORS[2], 3.0)
    with pytest.raises(TypeError, match="takes 4 positional arguments, got 3"):
        check(*TENSORS[:3])
    with pytest.raises(TypeError, match="a tensor spec is"):
        tensor_program((torch.float32, "cpu", False, (1,), None))
    with pytest.raises(ValueError, match="an earlier node"):
        checks.guard_program(1, [(0, 2, "x")], [])
    with pytest.raises(ValueError, match="a known op"):
        checks.guard_program(1, [(-1, STEP_ARG, 0)], [(0, 99, None)])


def layout(t: torch.Tensor) -> tuple:
    return (t.dtype, t.device, t.requires_grad, tuple(t.shape), t.stride())


def test_tensors_check_compares_layouts_and_the_addresses_it_is_given():
    weight, x = torch.nn.Parameter(torch.randn(4, 4)), torch.randn(3)
    check = native.tensors_check([(0, layout(weight), weight.data_ptr()), (2, layout(x), None)])
    assert check([weight, "anything", x])
    assert check([weight, 1, torch.randn(3)])  # no address given for position 2: any tensor
    moved = torch.nn.Parameter(weight.detach().clone())
    assert not check([moved, 1, x])
    # at the same address: another layout (the transpose of a square), another dtype
    assert weight.detach().t().data_ptr() == weight.data_ptr()
    assert not check([weight.detach().t().requires_grad_(), 1, x])
    half = torch.randn(4, 4, dtype=torch.float16)
    assert not native.tensors_check([(0, layout(half), half.data_ptr())])(
        [half.view(torch.bfloat16)]
    )
    assert not check([weight, 1, x.view(3, 1)])
    assert not check([weight, 1])  # a missing item
    assert not check([1.0, 1, x])  # not a tensor
    assert not check([weight, 1, x.to_sparse()])


def test_tensors_check_is_none_without_the_module(monkeypatch):
    monkeypatch.setattr(config, "native_guards", False)
    assert native.tensors_check([(0, layout(BASE), None)]) is None


def scale_and_shift(x, w, b):
    return x @ w + b


def entry_guard_text() -> str:
    (entry,) = dispatch._caches[scale_and_shift.__code__].all_entries()
    return entry.guard_source.split("def ___first_failure")[0]


def fresh_inputs(**changes):
    inputs = {"x": torch.randn(3, 4), "w": torch.randn(4, 5), "b": torch.randn(5)}
    inputs.update(changes)
    return inputs


@pytest.mark.parametrize("native_guards", [True, False])
def test_guards_fold_into_one_call_only_where_turned_on(native_guards, monkeypatch):
    monkeypatch.setattr(config, "native_guards", native_guards)
    compiled = torchkiln.compile(scale_and_shift, backend="eager")
    compiled(**fresh_inputs())
    text = entry_guard_text()
    assert (f"{NATIVE_GUARD}(___fn, L_x, L_w, L_b)" in text) is native_guards
    assert ("L_w.stride() == (5, 1)" in text) is not native_guards
    assert ("___grad" in text) is not native_guards  # global state: a call in the program


@pytest.mark.parametrize("native_guards", [True, False])
def test_a_change_of_any_checked_metadata_recompiles(native_guards, monkeypatch):
    monkeypatch.setattr(config, "native_guards", native_guards)
    compiled = torchkiln.compile(scale_and_shift, backend="eager")
    changes = [
        {},
        {"b": torch.randn(5, dtype=torch.float64)},
        {"w": torch.randn(4, 5).requires_grad_()},
        {"b": torch.randn(1)},
        {"w": torch.randn(5, 4).t()},
        {"x": torch.randn(3, 4).to_sparse()},
        {},
    ]
    for change in changes:
        inputs = fresh_inputs(**change)
        torch.testing.assert_close(compiled(**inputs), scale_and_shift(**inputs))
    assert torchkiln.counters["frames"]["total"] == len(changes) - 1
    reasons = [e.first_failure(scale_and_shift, *fresh_inputs().values()) for e in
               dispatch._caches[scale_and_shift.__code__].all_entries()]  # fmt: skip
    assert reasons[0] is None and "L_b.dtype is torch.float64" in reasons[1]


class Obj:
    """What guards read: attributes of every kind the program steps through."""

    def __init__(self, **changes):
        self.a, self.f, self.n, self.neg = 1, 0.0, float("nan"), -0.0
        self.d = {"k": 2, 3: "v"}
        self.l, self.t = [1, 2], (1, 2)
        self.hooks, self.o, self.s = {}, None, "a'b"
        self.b = self.c = self.l
        self.fn = lambda: True
        self.__dict__.update(changes)

    def method(self):
        return 1


class KeysMissing(dict):
    def __missing__(self, key):
        return 2


class Raising(Obj):
    @property
    def a(self):
        raise RuntimeError("a property that raises")

    @a.setter
    def a(self, value):
        pass


NS = {
    "___T": Obj, "___int": int, "___float": float, "___copysign": math.copysign,
    "___keys": {"x": 1, "y": 2}.keys(), "___mro": Obj.__mro__, "___function": type(Obj.method), "___object": object,
}  # fmt: skip
#: Guard shapes the program makes (each checked against Python on every object below).
NATIVE = [
    "type(L_a) is ___T",
    "type(L_a.a) is ___int",
    "L_a.a == 1",
    "L_a.f == 0.0",
    "___copysign(1.0, L_a.f) == 1.0",
    "___copysign(1.0, L_a.neg) == -1.0",
    "L_a.n == 1.5",
    "L_a.d['k'] == 2",
    "L_a.d[3] == 'v'",
    "L_a.l[-1] == 2",
    "L_a.l[5] == 2",
    "L_a.t == (1, 2)",
    "L_a.t == (1,)",
    "type(L_a).__mro__ == (___T, ___object)",
    "type(L_a).__mro__ is ___mro",
    "L_a.o is None",
    "L_a.a is True",
    "L_a.b is L_a.c",
    "'k' not in L_a.d",
    "'z' not in L_a.d",
    "len(L_a.l) == 2",
    "list(L_a.d) == ['k', 3]",
    "not L_a.hooks",
    "not (L_a.hooks or L_a.l)",
    "___keys.isdisjoint(('a', 'b'))",
    "L_a.fn()",
    "not L_a.fn()",
    "type(type(L_a).__dict__['method']) is ___function",
    "L_a.s == 'a\\'b'",
    "L_a.missing == 1",
]
#: Shapes it leaves to Python.
PYTHON = ["L_a.a != L_a.a", "len(L_a.l) > 1", "L_a.a == L_a.f", "L_a.o is not None", "L_a.t == (1)"]
OBJECTS = [
    Obj(), Obj(a=2), Obj(a=True), Obj(a=1.0), Obj(f=-0.0), Obj(f=1), Obj(n=1.5),
    Obj(d={"k": 2}), Obj(d=KeysMissing()), Obj(d={"k": 2, 3: "v", "z": 0}), Obj(l=[1]),
    Obj(l=(1, 2)), Obj(t=[1, 2]), Obj(o=0), Obj(hooks={"h": 1}), Obj(c=[1, 2]),
    Obj(fn=lambda: 0), Obj(s="ab"), Obj(missing=1), Raising(), 3, None,
]  # fmt: skip


def python_answer(expr: str, value) -> bool:
    """What a guard function's ``(expr)`` answers: False where it raises."""
    fn = eval(f"lambda L_a: ({expr})", dict(NS))
    try:
        return bool(fn(value))
    except Exception:
        return False


@pytest.mark.parametrize("expr", NATIVE)
def test_the_program_answers_each_shape_as_python_does(expr):
    program, in_program = translate([(expr, None)], ["L_a"], NS, {}, checks.guard_program)
    assert in_program == [True]
    for i, value in enumerate(OBJECTS):
        assert program(value) is python_answer(expr, value), f"object {i}"


def test_other_shapes_stay_python_and_the_rest_of_a_guard_still_folds():
    exprs = [(expr, None) for expr in [*PYTHON, "L_a.a == 1"]]
    program, in_program = translate(exprs, ["L_a"], NS, {}, checks.guard_program)
    assert in_program == [False] * len(PYTHON) + [True]
    assert program(Obj()) and not program(Obj(a=2))
    assert translate(exprs[:-1], ["L_a"], NS, {}, checks.guard_program) is None


def test_a_namespace_that_rebinds_a_builtin_keeps_its_calls_in_python():
    builder = ProgramBuilder(["L_a"], {**NS, "len": lambda x: 2}, {})
    assert not builder.add("len(L_a.l) == 2")
    assert not builder.add("type(L_a) is ___T")
    assert builder.add("L_a.a == 1")


def test_a_shared_source_is_one_node_read_once_a_call():
    reads = collections.Counter()

    class Counting:
        def __getattr__(self, name):
            reads[name] += 1
            return Obj()

    exprs = [
        ("L_a.inner.a == 1", None),
        ("L_a.inner.f == 0.0", None),
        ("L_a.inner.o is None", None),
    ]
    program, _ = translate(exprs, ["L_a"], NS, {}, checks.guard_program)
    assert program(Counting()) and reads == {"inner": 1}


def test_an_interrupt_in_a_read_passes_through():
    class Interrupting:
        @property
        def a(self):
            raise KeyboardInterrupt

    program, _ = translate([("L_a.a == 1", None)], ["L_a"], NS, {}, checks.guard_program)
    with pytest.raises(KeyboardInterrupt):
        program(Interrupting())


def test_a_dropped_program_frees_what_it_holds_even_in_a_cycle():
    import gc
    import weakref

    class Held:
        pass

    ns = {"___T": Held}
    program, _ = translate([("type(L_a) is ___T", None)], ["L_a"], ns, {}, checks.guard_program)
    Held.program = program  # a cycle through the program: class -> program -> class
    ref = weakref.ref(Held)
    del Held, program, ns
    gc.collect()
    assert ref() is None
