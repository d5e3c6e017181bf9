"""Targets and mutations of the guard-soundness fuzz (``test_guard_fuzz.py``, issue #14).

A :class:`Target` is a function or ``nn.Module`` the fuzz compiles: how to build
it and its inputs, and the program state it reads that may change between
calls (its :class:`Knob` s: globals, closure cells, defaults, module
attributes, submodules, buffers, hooks). :func:`mutate` changes things
between calls, from every class the issue lists: shapes, dtypes,
``requires_grad``, global torch state (:class:`Env`), knobs, aliasing between
inputs, threads and config; and the memory layout of inputs (the same values
at a storage offset, strided, permuted, channels_last, expanded: see
:func:`laid_out`), and marks on the first input (``torchkiln.mark_dynamic`` with bounds,
``maybe_mark_dynamic``, ``mark_static``: see :func:`apply_mark`). A changed dimension
drifts back to its initial value over the next calls, so a run keeps revisiting states it
compiled before (the stale-entry case) without running out of cache entries.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import dataclasses
import json
import logging
import math
import random
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import torchkiln

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
THIS = sys.modules[__name__]


# ---------------------------------------------------------------------------
# Global torch state and config: one Env for the whole run, applied around every call.

ENV_VALUES: dict[str, tuple] = {
    "grad": (True, False),
    "autocast": (None, BF16, F16),  # torch.autocast("cpu", dtype=...), or none
    "inference": (False, True),
    "default_dtype": (F32, F64),
    "deterministic": (False, True),
    "function_mode": (False, True),  # a user's torch function mode (PlusOne) on the stack
}


class PlusOne(TorchFunctionMode):
    """A user's torch function mode: adds 1 to what a floating-point addition returns."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _ADDITIONS and isinstance(out, torch.Tensor) and out.is_floating_point():
            return out + 1
        return out


_ADDITIONS = (torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__)


@dataclasses.dataclass
class Env:
    """Global torch state a call runs under (the first value of each ENV_VALUES entry is torch's default)."""

    grad: bool = True
    autocast: torch.dtype | None = None
    inference: bool = False
    default_dtype: torch.dtype = F32
    deterministic: bool = False
    function_mode: bool = False
    #: Set for one call by a config mutation (0: "never compile, run eagerly").
    cache_size_limit: int | None = None

    def changed(self) -> str:
        fields = [(k, getattr(self, k)) for k in (*ENV_VALUES, "cache_size_limit")]
        return ",".join(f"{k}={short(v)}" for k, v in fields if v != default_of(k)) or "-"

    @contextlib.contextmanager
    def thread_local(self) -> Iterator[None]:
        """Grad mode, autocast, inference mode and torch function modes: each thread has its own."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.set_grad_enabled(self.grad))
            if self.function_mode:
                stack.enter_context(PlusOne())
            if self.autocast is not None:
                stack.enter_context(torch.autocast("cpu", dtype=self.autocast))
            if self.inference:
                stack.enter_context(torch.inference_mode())
            yield

    @contextlib.contextmanager
    def process_wide(self) -> Iterator[None]:
        """Default dtype, deterministic algorithms and config: shared by all threads."""
        dtype, det = torch.get_default_dtype(), torch.are_deterministic_algorithms_enabled()
        limit = torchkiln.config.cache_size_limit
        torch.set_default_dtype(self.default_dtype)
        torch.use_deterministic_algorithms(self.deterministic)
        if self.cache_size_limit is not None:
            torchkiln.config.cache_size_limit = self.cache_size_limit
        try:
            yield
        finally:
            torchkiln.config.cache_size_limit = limit
            torch.use_deterministic_algorithms(det)
            torch.set_default_dtype(dtype)


def default_of(field: str) -> Any:
    return ENV_VALUES[field][0] if field in ENV_VALUES else None


def short(value: Any) -> str:
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else repr(value)


# ---------------------------------------------------------------------------
# Inputs: a Spec says which kind; building twice from one seed gives equal, distinct inputs.


@dataclasses.dataclass
class Spec:
    shape: int = 0  # index into Target.shapes
    dtype: torch.dtype = F32
    requires_grad: bool = False
    alias: str = "distinct"  # or one of Target.alias
    inference_inputs: bool = False
    layout: str = "contiguous"  # or one of Target.layouts
    #: ``torchkiln.mark_*`` call on the first input tensor before each call (see apply_mark)
    mark: Mark | None = None

    def changed(self, target: Target) -> str:
        parts = [f"shape={target.shapes[self.shape]}", f"dtype={short(self.dtype)}"]
        if self.requires_grad:
            parts.append("requires_grad")
        if self.inference_inputs:
            parts.append("inference_inputs")
        if self.alias != "distinct":
            parts.append(f"alias={self.alias}")
        if self.layout != "contiguous":
            parts.append(f"layout={self.layout}")
        if self.mark is not None:
            parts.append(f"mark={self.mark}")
        return ",".join(parts)


class Mark(NamedTuple):
    """``torchkiln.mark_dynamic(x, dim, min=low, max=high)`` (kind "dynamic"),
    ``maybe_mark_dynamic(x, dim)`` ("maybe") or ``mark_static(x, dim)`` ("static")."""

    kind: str
    dim: int
    low: int | None = None
    high: int | None = None

    def __str__(self) -> str:
        bounds = f", min={self.low}, max={self.high}" if self.kind == "dynamic" else ""
        return f"{self.kind}(dim {self.dim}{bounds})"


def apply_mark(mark: Mark | None, args: tuple) -> str:
    """Marks the first input tensor as ``mark`` says, before a compiled call (as a user marks
    each batch). ``mark_dynamic`` refuses a size outside its bounds, or 0 or 1 (documented,
    tested in test_dynamic_shapes.py): that call goes unmarked, and meets the entries the
    marked calls compiled (their bound guards must fail). Returns what was done."""
    first = next((t for t in flat_tensors(args)), None)
    if mark is None or first is None or mark.dim >= first.dim():
        return ""
    try:
        if mark.kind == "dynamic":
            torchkiln.mark_dynamic(first, mark.dim, min=mark.low, max=mark.high)
        elif mark.kind == "maybe":
            torchkiln.maybe_mark_dynamic(first, mark.dim)
        else:
            torchkiln.mark_static(first, mark.dim)
    except ValueError:
        return f"not marked: size {first.size(mark.dim)} out of {mark}"
    return f"marked {mark}"


def flat_tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from flat_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from flat_tensors(v)


def rand(spec: Spec, gen: torch.Generator, *shape: int, grad: bool | None = None) -> torch.Tensor:
    """Random values of ``spec``'s dtype, laid out in memory as ``spec.layout`` says."""
    t = torch.randn(shape, generator=gen, dtype=F32).to(spec.dtype)
    if spec.inference_inputs:
        with torch.inference_mode():
            t = laid_out(t.clone(), spec.layout, gen)
    else:
        t = laid_out(t, spec.layout, gen)
    if spec.requires_grad if grad is None else grad:
        t.requires_grad_()
    return t


def aliased_pair(
    spec: Spec, gen: torch.Generator, shape: tuple
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two inputs of one shape: distinct tensors, or two names for one buffer (``spec.alias``)."""
    if spec.alias == "overlap":
        base = rand(spec, gen, shape[0] + 1, *shape[1:])
        return base[:-1], base[1:]
    if spec.alias == "transposed":
        return one_input(spec, gen, shape), rand(spec, gen, *shape)
    a = rand(spec, gen, *shape)
    return a, {
        "distinct": lambda: rand(spec, gen, *shape),
        "same": lambda: a,
        "slice": lambda: a[:],
        # strides that no flat view has (permuted, expanded) are viewed as they are
        "view": lambda: a.view(-1).view(shape) if a.is_contiguous() else a.view(shape),
    }[spec.alias]()


def one_input(spec: Spec, gen: torch.Generator, shape: tuple) -> torch.Tensor:
    if spec.alias == "transposed":  # same values' shape, other strides
        return rand(spec, gen, *reversed(shape)).t()
    return rand(spec, gen, *shape)


# ---------------------------------------------------------------------------
# Layouts: the same values in another memory layout (Spec.layout, besides "contiguous").

#: Every layout an input may take besides "contiguous".
LAYOUTS = ("offset", "strided", "permuted", "channels_last", "expanded")
#: A target's layouts unless it says otherwise: channels_last changes 4-D tensors only.
FLAT_LAYOUTS = ("offset", "strided", "permuted", "expanded")
#: The layouts of inputs a target writes: eager refuses to write an expanded one (its elements share memory).
WRITABLE = ("offset", "strided", "permuted")


def laid_out(t: torch.Tensor, layout: str, gen: torch.Generator) -> torch.Tensor:
    """``t``'s values (shape, dtype) in ``layout``; a layout that does not apply to its rank leaves it as it is.

    offset: a view starting inside a larger storage (``storage[5:17].view(3, 4)``); strided: every
    other element of a last dimension twice as long (``big[..., ::2]``), from element 0 or 1;
    permuted: dense, dimensions stored in reverse order (a transpose's strides); channels_last: of a
    4-D tensor; expanded: each row's first element repeated along the last dimension (stride 0),
    not along the batch: equal rows would give a batch norm a zero variance to divide noise by.
    The storage outside an offset or strided view is random, not zeros: a compiled call that reads
    or writes it where eager does not gives another answer (the fuzz compares whole storages).
    """
    if layout == "expanded":
        return t.narrow(-1, 0, 1).clone().expand(t.shape) if t.dim() else t
    if layout == "permuted" and t.dim() >= 2:
        reverse = tuple(reversed(range(t.dim())))
        return t.permute(reverse).contiguous().permute(reverse)
    if layout == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "offset":
        start = int(torch.randint(1, 8, (), generator=gen))
        view = filler(t.dtype, gen, start + t.numel() + 3)[start : start + t.numel()].view(t.shape)
    elif layout == "strided" and t.dim() >= 1:
        start = int(torch.randint(0, 2, (), generator=gen))
        view = filler(t.dtype, gen, *t.shape[:-1], 2 * t.shape[-1])[..., start::2]
    else:
        return t
    return view.copy_(t)


def filler(dtype: torch.dtype, gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=F32).to(dtype)


# ---------------------------------------------------------------------------
# Knobs: program state a target reads, changed between calls.


class Fresh:
    """A knob value built anew for each side, so the twin and the compiled side get equal, distinct objects."""

    def __init__(self, label: str, make: Callable[[], Any]):
        self.label, self.make = label, make

    def __call__(self) -> Any:
        with torch.random.fork_rng(devices=[]), default_dtype(F32):
            torch.manual_seed(0)
            return self.make()

    def __repr__(self) -> str:
        return self.label


@dataclasses.dataclass
class Knob:
    """``apply(side, value)`` sets the value on one side (the function, or a module and its twin)."""

    name: str
    values: tuple  # values[0] is the initial one
    apply: Callable[[Any, Any], None]


def global_knob(name: str, *values: Any) -> Knob:
    return Knob(name, values, lambda _fn, v: setattr(THIS, name, v))


def cell_knob(name: str, *values: Any) -> Knob:
    def apply(fn: Callable, value: Any) -> None:
        fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents = value

    return Knob(f"cell {name}", values, apply)


def attr_knob(path: str, *values: Any) -> Knob:
    """``side.<path> = value``, set on the compiled object as a user does (``cm.scale = 2``)."""
    owner_path, _, name = path.rpartition(".")

    def apply(side: Any, value: Any) -> None:
        owner = side
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part)
        if isinstance(value, (torch.Tensor, nn.Module)):
            value = value.to(module_dtype(side))
        setattr(owner, name, value)

    return Knob(f".{path}", values, apply)


def module_dtype(m: nn.Module) -> torch.dtype:
    return next(m.parameters()).dtype


def training_knob() -> Knob:
    """The ways a user switches modes: ``train()``, ``eval()``, or the attribute itself."""

    def apply(m: nn.Module, how: str) -> None:
        if how == "train()":
            m.train()
        elif how == "eval()":
            m.eval()
        else:
            m.training = how == "training=True"

    return Knob("training", ("train()", "eval()", "training=False", "training=True"), apply)


def dtype_knob() -> Knob:
    return Knob("to(dtype)", (F32, F64), lambda m, dtype: m.to(dtype))


def scale_input(module, args):
    return (args[0] * 2,)


def add_one(module, args, output):
    return output + 1


def triple_grads(module, grad_input, grad_output):
    return tuple(None if g is None else g * 3 for g in grad_input)


HOOKS = {
    "pre": ("register_forward_pre_hook", scale_input),
    "post": ("register_forward_hook", add_one),
    "backward": ("register_full_backward_hook", triple_grads),
}
HANDLES: dict[int, list] = {}


def hooks_knob(*values: str) -> Knob:
    """Hooks as ``"pre+post@orig"``: registered on the original module or on the compiled object."""

    def apply(side: nn.Module, value: str) -> None:
        orig = getattr(side, "_orig_mod", side)
        for handle in HANDLES.pop(id(orig), []):
            handle.remove()
        kinds, _, where = value.partition("@")
        owner = side if where == "compiled" else orig
        for kind in filter(None, kinds.split("+")):
            register, hook = HOOKS[kind]
            HANDLES.setdefault(id(orig), []).append(getattr(owner, register)(hook))

    return Knob("hooks", values, apply)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


# ---------------------------------------------------------------------------
# Targets.


@dataclasses.dataclass
class Target:
    name: str
    category: str  # the class of bug this target is built to expose
    build: Callable[[], Any]  # a fresh function, nn.Module or nn.ModuleList (compile_each)
    args: Callable[[Spec, torch.Generator, tuple], tuple]
    knobs: tuple[Knob, ...] = ()
    shapes: tuple = ((2, 3), (4, 3))
    dtypes: tuple = (F32, F64)
    grad: bool = True  # inputs may require grad
    alias: tuple[str, ...] = ()  # aliasing modes besides "distinct"
    inference_inputs: bool = False  # inputs may be inference tensors
    layouts: tuple[str, ...] = FLAT_LAYOUTS  # memory layouts of inputs besides "contiguous"
    threads: bool = True  # thread-safe in eager: may be called from several threads at once
    inductor: bool = False  # part of the (slower) inductor subset
    touched: tuple[str, ...] = ()  # globals of this module the target writes
    uses_random: bool = False  # consumes Python's ``random`` state
    compile_each: bool = False  # build() gives a ModuleList; each instance compiled on its own
    call: Callable[[Any, tuple], Any] = lambda obj, args: obj(*args)
    #: How many times its outputs' largest value the operands of its low-precision ops
    #: are: a low-precision result is off by the rounding of those operands
    #: (``test_guard_fuzz.tolerance``), and ``sin(x @ w)`` is off by the rounding of the
    #: products, whose magnitudes sum to up to ~8 where the outputs are at most 1 (a backend
    #: may round them once where eager rounds ``x`` and ``w`` first: OpenVINO computes a
    #: float16 matmul of float32 inputs in float32).
    low_precision_slack: float = 1.0


TARGETS: list[Target] = []


def target(**kwargs: Any) -> Callable:
    """Register the decorated function (or module class) as a target named after it."""

    def register(obj: Any) -> Any:
        build = kwargs.pop("build", None) or (obj if isinstance(obj, type) else lambda: obj)
        TARGETS.append(Target(name=obj.__name__, build=build, **kwargs))
        return obj

    return register


def x_only(spec, gen, shape):
    return (one_input(spec, gen, shape),)


def x_and_w(spec, gen, shape):
    return rand(spec, gen, *shape), rand(spec, gen, shape[-1], 4)


# -- plain functions -----------------------------------------------------------------


@target(
    category="plain",
    args=aliased_pair,
    dtypes=(F32, F64, BF16),
    alias=("same", "transposed"),
    inductor=True,
)
def plain_pointwise(x, y):
    return (x.sin() + y * 2).relu(), x.cos()


@target(category="plain", args=x_and_w, inductor=True)
def plain_matmul_reduce(x, w):
    h = x @ w
    return h.softmax(-1).sum(0) + h.mean()


@target(category="python semantics", args=x_only, inference_inputs=True, alias=("transposed",))
def tensor_queries(x):
    y = x * 2 if x.requires_grad else x * 3
    if x.is_inference():
        y = y + 1
    if x.dtype == torch.float64:
        y = y - 1
    if x.is_contiguous():
        y = y * 1.5
    return y + x.shape[0]


# -- closures and globals -----------------------------------------------------------


def make_closure_reader():
    scale = 2.0
    offsets = [0.5]
    bias = torch.ones(3)

    def closure_reader(x):
        return x * scale + offsets[0] + bias

    return closure_reader


def set_offset(fn, value):
    fn.__closure__[fn.__code__.co_freevars.index("offsets")].cell_contents[0] = value


def fill_bias(fn, value):
    fn.__closure__[fn.__code__.co_freevars.index("bias")].cell_contents.fill_(value)


TARGETS.append(
    Target(
        name="closure_reader",
        category="closures",
        build=make_closure_reader,
        args=x_only,
        inductor=True,
        knobs=(
            cell_knob("scale", 2.0, -1.0, 0.25),
            Knob("offsets[0]", (0.5, 3.0), set_offset),
            cell_knob(
                "bias",
                Fresh("ones(3)", lambda: torch.ones(3)),
                Fresh("arange(3)", lambda: torch.arange(3.0)),
            ),
            Knob("bias.fill_", (1.0, -2.0), fill_bias),
        ),
    )
)

SCALE = 2.0
BIAS = torch.zeros(3)
FLAG = True
LOOKUP = {"k": 1.0}
FACTOR = 0.0  # read as THIS.FACTOR: an attribute of a module object


class Settings:
    def __init__(self):
        self.scale = 1.0
        self.mode = "plain"


SETTINGS = Settings()


def set_lookup(_fn, value):
    LOOKUP["k"] = value


@target(
    category="globals",
    args=x_only,
    inductor=True,
    knobs=(
        global_knob("SCALE", 2.0, 0.5, -3.0),
        global_knob(
            "BIAS",
            Fresh("zeros(3)", lambda: torch.zeros(3)),
            Fresh("linspace", lambda: torch.linspace(-1, 1, 3)),
        ),
        Knob("BIAS.fill_", (0.0, 1.5), lambda _fn, v: BIAS.fill_(v)),
        global_knob("FLAG", True, False),
        Knob("LOOKUP['k']", (1.0, 4.0), set_lookup),
        global_knob("FACTOR", 0.0, 5.0),
        Knob("SETTINGS.scale", (1.0, -2.0), lambda _fn, v: setattr(SETTINGS, "scale", v)),
        Knob("SETTINGS.mode", ("plain", "double"), lambda _fn, v: setattr(SETTINGS, "mode", v)),
    ),
)
def global_reader(x):
    y = x * SCALE + BIAS
    if FLAG:
        y = y.relu()
    if SETTINGS.mode == "double":
        y = y * 2
    return y * LOOKUP["k"] * SETTINGS.scale + THIS.FACTOR


class Scaler:
    def __init__(self):
        self.factor = 2.0
        self.offsets = [0.0]

    def apply(self, x):
        return x * self.factor + self.offsets[-1]


TARGETS.append(
    Target(
        name="bound_method",
        category="object attributes",
        build=lambda: Scaler().apply,
        args=x_only,
        knobs=(
            Knob("obj.factor", (2.0, -1.0, 0.5), lambda m, v: setattr(m.__self__, "factor", v)),
            Knob(
                "obj.offsets",
                (Fresh("[0.0]", lambda: [0.0]), Fresh("[0.0, 3.0]", lambda: [0.0, 3.0])),
                lambda m, v: setattr(m.__self__, "offsets", v),
            ),
        ),
    )
)


STEPS = torch.zeros(())
LAST = None
TRACE: list[int] = []


def fresh_global_writer():
    global LAST
    STEPS.zero_()
    TRACE.clear()
    LAST = None
    return global_writer


@target(
    category="globals",
    build=fresh_global_writer,
    args=x_only,
    threads=False,
    touched=("STEPS", "LAST", "TRACE"),
)
def global_writer(x):
    global LAST
    STEPS.add_(1)
    LAST = x * STEPS
    TRACE.append(x.shape[0])
    del TRACE[:-2]
    return LAST + 1


# -- defaults --------------------------------------------------------------------------


def scaled_helper(x, k=0.5):
    return x * k


def set_helper_defaults(_fn, value):
    scaled_helper.__defaults__ = value


def x_and_kwargs(spec, gen, shape):
    pick = torch.randint(0, 4, (), generator=gen).item()
    return rand(spec, gen, *shape), ({}, {}, {"scale": 3.0}, {"shift": 0.5})[pick]


@target(
    category="defaults",
    args=x_and_kwargs,
    call=lambda fn, args: fn(args[0], **args[1]),
    inductor=True,
    knobs=(
        Knob(
            "__defaults__", ((2.0,), (-1.0,), (0.5,)), lambda fn, v: setattr(fn, "__defaults__", v)
        ),
        Knob(
            "__kwdefaults__",
            ({"shift": 1.0}, {"shift": -4.0}),
            lambda fn, v: setattr(fn, "__kwdefaults__", v),
        ),
        Knob("scaled_helper.__defaults__", ((0.5,), (3.0,)), set_helper_defaults),
    ),
)
def with_defaults(x, scale=2.0, *, shift=1.0):
    return scaled_helper(x) * scale + shift


DEFAULT_CFG = {"scale": 1.0}
DEFAULT_W = torch.ones(3)


def set_default_cfg(fn, value):
    fn.__defaults__[0]["scale"] = value


def fill_default_w(fn, value):
    fn.__defaults__[1].fill_(value)


def fresh_defaults(label, scale, w):
    return Fresh(label, lambda: ({"scale": scale}, torch.full((3,), w)))


@target(
    category="defaults",
    args=x_only,
    knobs=(
        Knob(
            "__defaults__",
            (fresh_defaults("(cfg 1, w 1)", 1.0, 1.0), fresh_defaults("(cfg -2, w 3)", -2.0, 3.0)),
            lambda fn, v: setattr(fn, "__defaults__", v),
        ),
        Knob("cfg['scale']", (1.0, 2.5), set_default_cfg),
        Knob("w.fill_", (1.0, -0.5), fill_default_w),
    ),
)
def mutable_default(x, cfg=DEFAULT_CFG, w=DEFAULT_W):
    return (x * w) * cfg["scale"]


# -- global torch state -----------------------------------------------------------------


@target(category="global torch state", args=x_only, inductor=True)
def grad_branch(x):
    y = x * 2 if torch.is_grad_enabled() else x * 3
    with torch.no_grad():
        z = x * 4
    return y + z


@target(category="global torch state", args=x_and_w, inductor=True)
def autocast_branch(x, w):
    y = x @ w
    if torch.is_autocast_enabled("cpu"):
        y = y * 2
    return y + 1


@target(category="global torch state", args=x_only)
def sets_grad_mode(x):
    with torch.enable_grad():
        y = x * 2
    with torch.no_grad():
        z = y + 1
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(not before)
    w = x * 3
    torch.set_grad_enabled(before)
    return y, z, w


@target(category="global torch state", args=x_and_w)
def inner_autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        with torch.autocast("cpu", enabled=False):
            z = x.float() @ w.float()
    return y, z, torch.get_autocast_dtype("cpu")


@target(category="global torch state", args=x_only, inference_inputs=True)
def inference_branch(x):
    y = x + 1 if torch.is_inference_mode_enabled() else x * 2
    return y, x.is_inference()


@target(category="global torch state", args=x_only)
def default_dtype_branch(x):
    ones = torch.ones(x.shape[-1])
    if torch.get_default_dtype() == torch.float64:
        ones = ones * 2
    return x * torch.tensor(1.5) + ones, ones.dtype


@target(category="global torch state", args=x_only)
def deterministic_branch(x):
    if torch.are_deterministic_algorithms_enabled():
        return x.cumsum(0)
    return x.flip(0)


# -- aliasing and in-place mutation of inputs ---------------------------------------------

ALIASES = ("same", "slice", "view", "overlap")


@target(category="aliasing", args=aliased_pair, alias=ALIASES, layouts=WRITABLE, inductor=True)
def inplace_scale(a, b):
    """With grad: eager raises (a leaf that requires grad mutated in place) unless grad mode is off."""
    a.mul_(2)
    return a + b


@target(category="aliasing", args=aliased_pair, grad=False, alias=ALIASES, layouts=WRITABLE)
def inplace_both(a, b):
    a.add_(1)
    b.mul_(3)
    return a - b


@target(category="aliasing", args=x_only, grad=False, alias=("transposed",), layouts=WRITABLE)
def inplace_view(x):
    x[0].zero_()
    x.reshape(-1)[1:3].add_(1)
    return x.sum(-1)


@target(
    category="aliasing", args=aliased_pair, grad=False, alias=("same", "slice"), layouts=WRITABLE
)
def copy_into(out, x):
    out.copy_(x.sin())
    return out


@target(category="aliasing", args=x_only, inductor=True)
def returns_views(x):
    y = x * 2
    return y, y.view(-1), y[0], x[1:], x * 2


@target(category="aliasing", args=x_only)
def sets_requires_grad(x):
    x.requires_grad_(True)
    return x * 2


@target(category="aliasing", args=x_only, grad=False)
def inplace_metadata(x):
    x.unsqueeze_(0)
    return x.sum(-1)


@target(category="aliasing", args=aliased_pair, grad=False)
def set_storage(x, y):
    x.set_(y)
    return x + 1


# -- memory layout of inputs -----------------------------------------------------------------


@target(category="layout", args=x_only, alias=("transposed",), inductor=True)
def layout_queries(x):
    """What a program sees of its input's layout: ``contiguous()`` returns the input itself only
    when it is contiguous, ``reshape`` a view only where the strides allow one."""
    y = x * 2 if x.is_contiguous() else x * 3
    y = y + x.stride(0) - x.storage_offset()
    return y, x.contiguous(), x.reshape(-1), x.t().reshape(-1), x.flatten().cumsum(0)


@target(category="layout", args=x_only, grad=False)
def view_or_copy(x):
    """``view`` raises for strides no flat view has: a graph traced without the error is stale there."""
    try:
        flat = x.view(-1)
    except RuntimeError:
        flat = x.reshape(-1) + 1
    flat[:2].mul_(2)  # writes the input only where flat is a view of it
    return flat, x.sum(0)


@target(category="layout", args=x_only, shapes=((2, 3), (3, 4)))
def as_strided_reads(x):
    """``as_strided`` addresses the storage: what it reads depends on the offset and the strides."""
    return x.as_strided((2, 2), (1, 2), 1) * 2, x.diagonal() + 1, x.unfold(1, 2, 1).sum(-1)


@target(category="layout", args=x_only, inductor=True)
def layout_reductions(x):
    """Reductions, a matmul and a gather index their input by its strides: a kernel compiled for
    one layout reads another's elements out of place."""
    return x.sum(0), x.amax(-1), x.t() @ x, x.cumsum(1), x[:, [2, 0]]


def image_and_filter(spec, gen, shape):
    return rand(spec, gen, *shape), rand(spec, gen, 4, shape[1], 3, 3)


@target(
    category="layout",
    args=image_and_filter,
    shapes=((2, 3, 5, 5), (1, 3, 4, 6)),
    layouts=LAYOUTS,
    inductor=True,
)
def conv_pointwise(x, w):
    """A channels_last image stays channels_last through a convolution; its NHWC rows are a view."""
    y = torch.nn.functional.conv2d(x, w, padding=1).relu()
    return y, y.mean((2, 3)), x.permute(0, 2, 3, 1).reshape(-1, x.shape[1]), x * 2


@target(
    category="layout",
    args=x_only,
    shapes=((2, 3, 4, 4), (2, 3, 2, 5)),
    grad=False,
    layouts=(*WRITABLE, "channels_last"),
    inductor=True,
)
def inplace_image(x):
    """Writes part of a 4-D input, and returns a view of it."""
    x[:, 1:].mul_(2)
    x[..., :1].zero_()
    return x.sum(1), x[:, 0]


# -- Python semantics ---------------------------------------------------------------------

MEMO: dict[tuple, torch.Tensor] = {}


def fresh_memoized():
    MEMO.clear()
    return memoized


@target(category="globals", build=fresh_memoized, args=x_only, threads=False, touched=("MEMO",))
def memoized(x):
    key = tuple(x.shape)
    if key not in MEMO:
        MEMO[key] = torch.ones(x.shape[-1]) * (len(MEMO) + 1)
    return x * MEMO[key]


def x_and_maybe_wrong_w(spec, gen, shape):
    rows = 5 if torch.randint(0, 3, (), generator=gen).item() == 0 else shape[-1]
    return rand(spec, gen, *shape), rand(spec, gen, rows, 4)


@target(category="python semantics", args=x_and_maybe_wrong_w)
def try_except(x, w):
    try:
        y = x @ w
    except RuntimeError:
        y = x.sum(-1, keepdim=True)
    if x.shape[0] > 3:
        raise ValueError("batch too large")  # both sides must raise it
    return y


def several(spec, gen, shape):
    return tuple(rand(spec, gen, *shape) for _ in range(shape[0]))


@target(category="python semantics", args=several, shapes=((2, 3), (3, 3)))
def varargs(*xs):
    return sum(xs), len(xs)


@target(category="python semantics", args=aliased_pair)
def tuple_eq(x, y):
    same = (x, y) == (x, y)  # True in Python: identity comes before __eq__
    return (x + y if same else x - y), [x] == [x], x in [x]


def tensor_list(spec, gen, shape):
    return ([rand(spec, gen, 3) for _ in range(shape[0])],)


@target(category="python semantics", args=tensor_list, shapes=((2,), (3,)))
def list_ops(xs):
    out = [t * 2 for t in xs]
    xs.append(out[0])
    xs.extend(xs[-1] * 2 for _ in range(2))  # each item reads the one appended before it
    return out, len(xs)


def tensor_dict(spec, gen, shape):
    keys = ("a", "b") if torch.randint(0, 2, (), generator=gen).item() else ("b", "a")
    return rand(spec, gen, *shape), {k: rand(spec, gen, *shape) for k in keys}


@target(category="python semantics", args=tensor_dict)
def dict_views(x, d):
    keys, values, items = d.keys(), d.values(), d.items()
    d["c"] = x + 1
    total = sum(v.sum() for v in values)
    return keys, values, items, total, len(keys)


class Plain:
    pass


class CallMe:
    def __call__(self):
        return 1


def text_and_object(spec, gen, shape):
    pick = torch.randint(0, 4, (), generator=gen).item()
    return rand(spec, gen, *shape), ("10 bar", "bar 1")[pick % 2], (Plain(), CallMe())[pick // 2]


@target(category="python semantics", args=text_and_object)
def strings_callable(x, s, obj):
    y = x * 2 if "10" in s else x * 3
    if callable(obj):
        y = y + 1
    return y, s.split()


@target(category="python semantics", args=x_only)
def numpy_sizes(x):
    n = int(np.prod(np.array(x.shape)))
    return x.reshape(n) * 2, n


def scalar_args(spec, gen, shape):
    pick = torch.randint(0, 5, (), generator=gen).item()
    return rand(spec, gen, *shape), (2, 2.0, True, torch.tensor(2.0), torch.tensor(2))[pick]


@target(category="python semantics", args=scalar_args)
def scalar_kinds(x, s):
    return x * s + s, type(s).__name__


class Point(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


class Pair(tuple):
    pass


@target(category="python semantics", args=aliased_pair)
def lazy_iters(x, y):
    return (
        map(torch.sin, (x, y)),
        zip((x, y), (1, 2)),
        filter(None, (x.shape[0], 0)),
        Point(x + y, y),
        Pair((x, y)),
    )


def point(spec, gen, shape):
    return (Point(*aliased_pair(spec, gen, shape)),)


@target(category="python semantics", args=point)
def namedtuple_io(pt):
    return Point(pt.x + pt.y, pt.y * 2), type(pt).__name__


@target(category="python semantics", args=x_only, threads=False, uses_random=True)
def random_module(x):
    r = random.random()
    order = [0, 1, 2]
    random.shuffle(order)
    return x * r + random.choice(order), order


def signed_zero_args(spec, gen, shape):
    pick = torch.randint(0, 3, (), generator=gen).item()
    return rand(spec, gen, *shape), (0.0, -0.0, 2.0)[pick]


@target(category="python semantics", args=signed_zero_args, inductor=True)
def signed_zero(x, c):
    return 1 / torch.full_like(x, c), x * math.copysign(1.0, c)


def with_parameter(spec, gen, shape):
    p = rand(spec, gen, shape[-1], grad=False)
    return rand(spec, gen, *shape), nn.Parameter(p) if torch.randint(0, 3, (), generator=gen) else p


@target(category="python semantics", args=with_parameter)
def parameter_arg(x, p):
    return x * p + p.sum()


# -- modules -------------------------------------------------------------------------------


@target(
    category="module attributes",
    args=x_only,
    inductor=True,
    knobs=(
        training_knob(),
        dtype_knob(),
        attr_knob("scale", 1.0, 2.5, -0.5),
        attr_knob("use_offset", True, False),
        attr_knob(
            "act", Fresh("ReLU()", nn.ReLU), Fresh("Tanh()", nn.Tanh), Fresh("GELU()", nn.GELU)
        ),
        attr_knob(
            "fc2",
            Fresh("Linear(8, 3)", lambda: nn.Linear(8, 3)),
            Fresh("Linear(8, 3, bias=False)", lambda: nn.Linear(8, 3, bias=False)),
        ),
        attr_knob(
            "offset",
            Fresh("zeros(3)", lambda: torch.zeros(3)),
            Fresh("full(3, 0.5)", lambda: torch.full((3,), 0.5)),
        ),
        Knob("offset.fill_", (0.0, -1.0), lambda m, v: m.offset.fill_(v)),
        Knob("requires_grad_", (True, False), lambda m, v: m.requires_grad_(v)),
        hooks_knob("", "pre@orig", "post@orig", "pre+post@compiled"),
    ),
)
class ScaledMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 3)
        self.scale = 1.0
        self.use_offset = True
        self.register_buffer("offset", torch.zeros(3))

    def forward(self, x):
        y = self.fc2(self.act(self.fc1(x))) * self.scale
        if self.use_offset:
            y = y + self.offset
        if self.training:
            y = y * 1.5
        return y


@target(
    category="module attributes",
    args=x_only,
    shapes=((8, 3), (12, 3)),
    threads=False,
    inductor=True,
    layouts=("offset", "strided", "permuted"),
    knobs=(training_knob(), dtype_knob(), attr_knob("bn.momentum", 0.1, 0.5, None)),
)
class NormNet(nn.Module):
    """BatchNorm in training mode updates its running statistics (buffers) on every call.

    No bias before the batch norm (its gradient is zero up to rounding), batches of 8+, and no
    expanded inputs (rows ``[a, a, a]`` make ``fc``'s output rank one, which the two norms map to
    a constant): otherwise float32 gradients are rounding noise that no fixed tolerance compares
    (eager's own differ from float64's by up to 3e-3 on expanded inputs).
    """

    def __init__(self):
        super().__init__()
        self.fc, self.bn, self.ln = nn.Linear(3, 6, bias=False), nn.BatchNorm1d(6), nn.LayerNorm(6)

    def forward(self, x):
        return self.ln(self.bn(self.fc(x)))


@target(
    category="hooks",
    args=x_only,
    knobs=(
        hooks_knob("pre+post@orig", "", "post@orig", "backward@orig", "pre@compiled"),
        training_knob(),
    ),
)
class HookedNet(nn.Module):
    """Hooks registered before compiling (the initial knob value), changed after."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x).tanh()


@target(category="module state", args=x_only, threads=False, knobs=(dtype_knob(),))
class StatefulNet(nn.Module):
    """Writes module state in forward: a buffer, a tensor attribute (keeps requires_grad), an int."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 3))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps += 1
        self.cache = self.weight * 2
        self.last_batch = x.shape[0]
        return x @ self.cache + self.steps


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.scale = 1.0

    def forward(self, x):
        return self.fc(x).relu() * self.scale + x


def block_and_x(spec, gen, shape):
    return torch.randint(0, 10, (), generator=gen).item(), rand(spec, gen, *shape)


TARGETS.append(
    Target(
        name="Blocks",
        category="module instances",
        build=lambda: nn.ModuleList(Block() for _ in range(10)),
        args=block_and_x,
        compile_each=True,
        knobs=(attr_knob("scale", 1.0, 0.5), training_knob(), dtype_knob()),
        call=lambda blocks, args: blocks[args[0]](*args[1:]),
    )
)


def set_depth(m: nn.Module, depth: int) -> None:
    while len(m.layers) > depth:
        del m.layers[-1]
    while len(m.layers) < depth:
        m.layers.append(Fresh("Linear", lambda: nn.Linear(3, 3))().to(module_dtype(m)))


@target(
    category="module attributes",
    args=x_only,
    knobs=(
        attr_knob("route", "a", "b"),
        Knob("len(layers)", (2, 3, 1), set_depth),
        dtype_knob(),
    ),
)
class RoutedNet(nn.Module):
    """Reads a string attribute to pick a submodule, and iterates a ModuleList that grows and shrinks."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 3), "b": nn.Linear(3, 3)})
        self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])
        self.route = "a"

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).sigmoid()
        return self.heads[self.route](x)


# -- hooks ------------------------------------------------------------------------------------
# Module hooks (forward, pre, kwargs, prepend, always_call, backward, global) and tensor hooks,
# registered, replaced and removed between calls; their hooks read globals that change too.
# Capture inlines a submodule only while it has no hooks (a guard), and calls one that has
# them natively: a missing guard or a hook run twice, never or in the wrong order shows here.
# A global that hooks read may be a knob of several targets: both sides read the same value.

HOOK_SCALE = 1.0
HOOK_SHIFT = 0.5
HOOK_GRAD_SCALE = 3.0
TENSOR_HOOK_SCALE = 2.0
GLOBAL_HOOKS = ""


def shift_input(module, args):
    return (args[0] + 1,)


def scaled_output(module, args, output):
    return output * HOOK_SCALE


def double_output(module, args, output):
    return output * 2


def count_call(module, args, output):
    """A side effect: the fuzz compares module attributes, so a hook run twice or never shows."""
    module.hook_calls = getattr(module, "hook_calls", 0) + 1


def shift_kwarg(module, args, kwargs):
    return args, {**kwargs, "shift": HOOK_SHIFT}


def add_kwarg(module, args, kwargs, output):
    return output + kwargs.get("shift", -1.0)


def scale_grad_input(module, grad_input, grad_output):
    return tuple(None if g is None else g * HOOK_GRAD_SCALE for g in grad_input)


def scale_grad_output(module, grad_output):
    return tuple(None if g is None else g * HOOK_GRAD_SCALE for g in grad_output)


#: A module hook by name: the ``register_*`` method, the hook, its options.
MODULE_HOOKS = {
    "pre": ("register_forward_pre_hook", scale_input, {}),
    "pre_first": ("register_forward_pre_hook", shift_input, {"prepend": True}),
    "post": ("register_forward_hook", add_one, {}),
    "post_first": ("register_forward_hook", double_output, {"prepend": True}),
    "scaled": ("register_forward_hook", scaled_output, {}),
    "count": ("register_forward_hook", count_call, {}),
    "always_count": ("register_forward_hook", count_call, {"always_call": True}),
    "kwpre": ("register_forward_pre_hook", shift_kwarg, {"with_kwargs": True}),
    "kwpost": ("register_forward_hook", add_kwarg, {"with_kwargs": True}),
    "full_backward": ("register_full_backward_hook", scale_grad_input, {}),
    "backward_pre": ("register_full_backward_pre_hook", scale_grad_output, {}),
    "legacy_backward": ("register_backward_hook", triple_grads, {}),
}


def module_hooks_knob(path: str, *values: str, owner: str = "") -> Knob:
    """Hooks of the submodule at ``path`` ("": the module, through the compiled object), or of
    the global module ``owner``, as ``"pre+post"``: the previous ones removed by their handles,
    these registered."""

    def apply(side: Any, value: str) -> None:
        orig = getattr(THIS, owner) if owner else getattr(side, "_orig_mod", side)
        module = orig.get_submodule(path)
        for handle in HANDLES.pop(id(module), []):
            handle.remove()
        register_on = module if path or owner else side
        for kind in filter(None, value.split("+")):
            register, hook, options = MODULE_HOOKS[kind]
            handle = getattr(register_on, register)(hook, **options)
            HANDLES.setdefault(id(module), []).append(handle)

    return Knob(f"hooks {owner or path or 'self'}", values, apply)


@target(
    category="hooks",
    args=x_only,
    knobs=(
        module_hooks_knob("", "", "post+post_first", "pre+pre_first", "scaled"),
        module_hooks_knob("fc1", "", "pre", "pre+pre_first", "scaled"),
        module_hooks_knob("fc2", "", "post+post_first", "count", "pre+scaled"),
        global_knob("HOOK_SCALE", 1.0, -2.0),
        dtype_knob(),
    ),
)
class SubmoduleHooksNet(nn.Module):
    """Forward and pre-hooks (some ``prepend=True``: order matters) on the module and on its
    submodules; ``scaled`` reads a global at each call."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).tanh())


class Shifted(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x, *, shift=0.0):
        return self.fc(x) + shift


@target(
    category="hooks",
    args=x_only,
    dtypes=(F32,),
    knobs=(
        module_hooks_knob("inner", "", "kwpre", "kwpost", "kwpre+kwpost"),
        module_hooks_knob("", "", "kwpost"),
        attr_knob("shift", 1.0, -2.0),
        global_knob("HOOK_SHIFT", 0.5, 4.0),
    ),
)
class KwargsHooksNet(nn.Module):
    """``with_kwargs=True`` hooks: a pre-hook that replaces a keyword argument, a forward hook
    that reads them (the module itself is called without any)."""

    def __init__(self):
        super().__init__()
        self.inner = Shifted()
        self.shift = 1.0

    def forward(self, x):
        return self.inner(x, shift=self.shift).sigmoid()


def scale_grad(grad):
    return grad * TENSOR_HOOK_SCALE


def scale_accumulated(param):
    param.grad.mul_(TENSOR_HOOK_SCALE)


def param_hooks_knob(name: str, *values: str) -> Knob:
    """A tensor hook on the parameter ``name``: ``"grad"`` scales its gradient, ``"accumulated"``
    (``register_post_accumulate_grad_hook``) scales ``.grad`` once backward has accumulated it."""

    def apply(side: Any, value: str) -> None:
        param = getattr(side, "_orig_mod", side).get_parameter(name)
        for handle in HANDLES.pop(id(param), []):
            handle.remove()
        if value:
            register, hook = {
                "grad": (param.register_hook, scale_grad),
                "accumulated": (param.register_post_accumulate_grad_hook, scale_accumulated),
            }[value]
            HANDLES[id(param)] = [register(hook)]

    return Knob(f"hooks {name}", values, apply)


@target(
    category="hooks",
    args=x_only,
    dtypes=(F32,),
    knobs=(
        module_hooks_knob("fc2", "", "full_backward", "backward_pre", "backward_pre+post"),
        # torch refuses a legacy hook on a module that had full ones: act has legacy ones only
        module_hooks_knob("act", "", "legacy_backward", "legacy_backward+pre"),
        global_knob("HOOK_GRAD_SCALE", 3.0, -0.5),
        param_hooks_knob("fc1.weight", "", "grad", "accumulated"),
    ),
)
class BackwardHooksNet(nn.Module):
    """Backward hooks on submodules change the gradients of the inputs and of earlier layers'
    parameters, tensor hooks on a parameter its gradient. The legacy ``register_backward_hook``
    hooks the output's ``grad_fn``: on a one-node module fed an intermediate (torch warns
    about it elsewhere)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Risky(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.limit = 3
        self.hook_calls = 0

    def forward(self, x):
        if x.shape[0] > self.limit:
            raise ValueError("batch too large")
        return self.fc(x)


@target(
    category="hooks",
    args=x_only,
    dtypes=(F32,),
    knobs=(
        module_hooks_knob("risky", "", "always_count", "count", "always_count+post"),
        attr_knob("risky.limit", 3, 1),
    ),
)
class AlwaysCallNet(nn.Module):
    """A submodule that raises (batches over ``risky.limit``), caught by the caller: its
    ``always_call=True`` hook still runs (and counts), a plain one does not."""

    def __init__(self):
        super().__init__()
        self.risky, self.fallback = Risky(), nn.Linear(3, 3)

    def forward(self, x):
        try:
            return self.risky(x).relu()
        except ValueError:
            return self.fallback(x)


@target(
    category="hooks",
    args=x_only,
    dtypes=(F32,),
    inductor=True,
    knobs=(module_hooks_knob("fc", "", "count", "pre+post", "scaled+count"),),
)
class CalledTwiceNet(nn.Module):
    """One submodule called twice in a forward: its hooks run on each call."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(self.fc(x).tanh()) + x


def global_pre_hook(module, args):
    """Returns a bare tensor, not a tuple: ``nn.Module`` wraps it."""
    return args[0] * 2 if isinstance(module, nn.Linear) else None


def global_forward_hook(module, args, output):
    if isinstance(module, nn.Linear) and output is not None:  # None: forward raised
        return output + HOOK_SHIFT
    return None


def global_backward_hook(module, grad_input, grad_output):
    if isinstance(module, nn.Linear):
        return scale_grad_input(module, grad_input, grad_output)
    return None


#: A global module hook by name (``torch.nn.modules.module.register_module_*``).
GLOBAL_MODULE_HOOKS = {
    "pre": ("register_module_forward_pre_hook", global_pre_hook, {}),
    "post": ("register_module_forward_hook", global_forward_hook, {}),
    "always": ("register_module_forward_hook", global_forward_hook, {"always_call": True}),
    "backward": ("register_module_full_backward_hook", global_backward_hook, {}),
}


def call_under_global_hooks(module, args):
    """Registers the global hooks ``GLOBAL_HOOKS`` names for this call only: registered for the
    whole run, they would change every other target (and test) too."""
    handles = []
    for kind in filter(None, GLOBAL_HOOKS.split("+")):
        register, hook, options = GLOBAL_MODULE_HOOKS[kind]
        handles.append(getattr(torch.nn.modules.module, register)(hook, **options))
    try:
        return module(*args)
    finally:
        for handle in handles:
            handle.remove()


@target(
    category="hooks",
    args=x_only,
    dtypes=(F32,),
    threads=False,  # global hooks: a thread's call would see another's
    call=call_under_global_hooks,
    knobs=(
        global_knob("GLOBAL_HOOKS", "", "pre", "post", "pre+always", "backward"),
        global_knob("HOOK_SHIFT", 0.5, 4.0),
    ),
)
class GlobalHooksNet(nn.Module):
    """Global module hooks added and removed between calls: they apply to every submodule."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(3, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


class OffsetLinear(nn.Linear):
    """Overrides ``__call__``: capture traces the override, whose ``super().__call__`` runs the hooks."""

    def __call__(self, x):
        return super().__call__(x) + 0.5


@target(
    category="hooks",
    args=x_only,
    dtypes=(F32,),
    knobs=(module_hooks_knob("fc", "", "pre", "post_first+scaled", "count"),),
)
class OverriddenCallNet(nn.Module):
    """Hooks on a submodule whose class overrides ``__call__``."""

    def __init__(self):
        super().__init__()
        self.fc = OffsetLinear(3, 3)

    def forward(self, x):
        return self.fc(x).tanh()


HOOKED_LAYER = nn.Linear(3, 3)


@target(
    category="hooks",
    args=x_only,
    dtypes=(F32,),
    knobs=(
        module_hooks_knob("", "", "pre", "post+scaled", "kwpost", owner="HOOKED_LAYER"),
        global_knob("HOOK_SCALE", 1.0, -2.0),
    ),
)
def global_module_call(x):
    """A function calling a module it reads from a global: hooks on it change between calls."""
    return HOOKED_LAYER(x).tanh() * 2


@target(
    category="hooks",
    args=x_and_w,
    inductor=True,
    knobs=(global_knob("TENSOR_HOOK_SCALE", 2.0, -0.5),),
)
def tensor_hook_inside(x, w):
    """``register_hook`` inside the compiled function, on an intermediate and on an input;
    the hook reads a global when backward runs. The sum adds squares: under bfloat16 autocast a
    sum of terms of both signs can cancel to far below the terms, and is then off by their
    rounding, which a tolerance scaled by the result does not cover (OpenVINO's ``h.sum()``
    was off by 0.0068 at -0.0176 where eager's own error against float64 is as large)."""
    h = x @ w
    if h.requires_grad:
        h.register_hook(scale_grad)
    if x.requires_grad:
        x.register_hook(scale_grad)
    return h.tanh(), h.square().sum()


def make_closure_tensor_hook():
    factor = 3.0

    def hook(grad):
        return grad * factor

    def closure_tensor_hook(x):
        """A hook from a closure cell (reading a cell of its own) on an intermediate used twice.
        (A lambda the frame defines would run the whole frame eagerly.)"""
        y = x.sin()
        if y.requires_grad:
            y.register_hook(hook)
        return y * y, y.cos()

    return closure_tensor_hook


def set_hook_factor(fn, value):
    hook = fn.__closure__[fn.__code__.co_freevars.index("hook")].cell_contents
    hook.__closure__[hook.__code__.co_freevars.index("factor")].cell_contents = value


TARGETS.append(
    Target(
        name="closure_tensor_hook",
        category="hooks",
        build=make_closure_tensor_hook,
        args=x_only,
        knobs=(Knob("hook factor", (3.0, -0.5), set_hook_factor),),
    )
)


def x_with_grad_hook(spec, gen, shape):
    """An input with a tensor hook registered before the call (when it requires grad)."""
    x = one_input(spec, gen, shape)
    if x.requires_grad:
        x.register_hook(scale_grad)
    return (x,)


@target(
    category="hooks",
    args=x_with_grad_hook,
    inductor=True,
    knobs=(global_knob("TENSOR_HOOK_SCALE", 2.0, -0.5),),
)
def input_with_hook(x):
    """Gradients reach a hooked input through the graph and through an output that may view it."""
    return (x * x).sum(0), x.reshape(-1)[:2], x.exp()


# -- graph breaks ---------------------------------------------------------------------------
# Each target breaks its frame (an unknown C function, the standard library, a data-dependent
# branch, ``.item()``): a graph up to the break, the unsupported code run in Python, then a
# resume function captured with guards and cache entries of its own. Its knobs change what the
# code after the break reads, so a resume function missing a guard is caught.

GB_SCALE = 1.0
GB_MODE = "sum"
GB_THRESHOLD = 0.5
GB_STEPS = 2
GB_DECAY = 0.5
GB_OFFSET = 0.0
GB_AMP = True
GB_AMP_SCALE = 1.0
GB_SHIFT = 1.0
GB_SEEN: list[int] = []
GB_SEEN_SCALE = 1.0
GB_INPLACE_SHIFT = 1.0
GB_VIEW_SHIFT = 1.0
GB_HEAD_SCALE = 1.0
GB_JSON_MODE = "sum"
GB_LOGGER = logging.getLogger("torchkiln.fuzz.graph_breaks")  # under "torchkiln": quieted


def make_locals_across_break():
    cell_scale = 2.0

    def locals_across_break(x, w):
        """Tensors, an int, a list and a dict live across the break; a global and a closure
        cell read after it."""
        h = x @ w
        rows = x.shape[0]
        parts = [h.sin(), h.cos()]
        meta = {"rows": rows, "tag": "a"}
        checksum = zlib.crc32(b"kiln")  # break: a C function capture does not know
        y = parts[0] * parts[1] + meta["rows"] * cell_scale
        if GB_MODE == "sum":
            y = y + parts[1]
        meta["tag"] = GB_MODE
        return y * GB_SCALE + checksum % 7, meta, parts

    return locals_across_break


TARGETS.append(
    Target(
        name="locals_across_break",
        category="graph breaks",
        build=make_locals_across_break,
        args=x_and_w,
        inductor=True,
        low_precision_slack=8.0,  # sin and cos of x @ w
        knobs=(
            global_knob("GB_SCALE", 1.0, -2.0, 0.5),
            global_knob("GB_MODE", "sum", "product"),
            cell_knob("cell_scale", 2.0, -1.0),
        ),
    )
)


@target(
    category="graph breaks",
    args=x_only,
    inductor=True,
    knobs=(global_knob("GB_THRESHOLD", 0.5, 1.5, -0.5),),
)
def data_dependent_break(x):
    """Conditions on exact values (a maximum, comparisons), never on sums: their rounding differs
    between backends. ``.item()`` and ``.tolist()`` give few values (a resume function is
    specialized on each)."""
    y = x * 2
    if x.amax() > GB_THRESHOLD:
        z = y.sin()
    else:
        z = y.cos() - 1
    repeats = (x[0, :2] > 0).sum().item()
    for _ in range(repeats):
        z = z * 1.5
    signs = (x[-1, :2] > 0).tolist()
    if signs[0]:
        z = z + x
    return z * (1 + sum(signs)), signs, repeats


@target(
    category="graph breaks",
    args=x_only,
    knobs=(global_knob("GB_STEPS", 2, 1, 3), global_knob("GB_DECAY", 0.5, -1.0)),
)
def break_in_loop(x):
    """``GB_STEPS`` sets how many resume functions the loop runs through; each reads
    ``GB_DECAY`` after its break."""
    acc = x * 0
    for i in range(GB_STEPS):
        acc = acc + x.sin() * (i + 1)
        zlib.crc32(b"step")  # a break in every iteration: each resume continues the loop
        acc = acc * GB_DECAY
    return acc, i


def x_and_log(spec, gen, shape):
    return rand(spec, gen, *shape), ["start"]


@target(
    category="graph breaks",
    args=x_and_log,
    inductor=True,
    knobs=(global_knob("GB_SHIFT", 1.0, -3.0),),
)
def break_in_blocks(x, log):
    """Breaks inside ``no_grad`` (the resumed part must still run without grad) and inside
    try/finally (the finally block runs once, after the resumed part)."""
    with torch.no_grad():
        scale = x.abs().amax() + 1
        GB_LOGGER.debug("scale %s", scale)  # break: logging
        scale = scale * GB_SHIFT
    try:
        y = x.exp() * scale
        zlib.crc32(b"try")  # break
        y = y + GB_SHIFT
        log.append(y.shape[0])
    finally:
        log.append("finally")
    return y, scale, torch.is_grad_enabled()


@target(
    category="graph breaks",
    args=x_and_w,
    knobs=(global_knob("GB_AMP", True, False), global_knob("GB_AMP_SCALE", 1.0, -2.0)),
)
def break_in_autocast(x, w):
    """A break inside an autocast block: the resumed part must still compute in bfloat16."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=GB_AMP):
        h = x @ w
        zlib.crc32(b"amp")  # break
        g = h @ w.t() * GB_AMP_SCALE
    return h, g, torch.is_autocast_enabled("cpu")


def offset_helper(t, k=3.0):
    u = t.sin() * k
    zlib.crc32(b"helper")  # break inside a function the target calls
    return u + GB_OFFSET


def set_offset_helper_defaults(_fn, value):
    offset_helper.__defaults__ = value


@target(
    category="graph breaks",
    args=x_only,
    inductor=True,
    knobs=(
        global_knob("GB_OFFSET", 0.0, 2.0),
        Knob("offset_helper.__defaults__", ((3.0,), (-0.5,)), set_offset_helper_defaults),
    ),
)
def break_in_callee(x):
    """The caller's locals (a tensor, an int, a list) stay live across a break in its callee."""
    a = x * 2
    rows = x.shape[0]
    saved = [a.cos()]
    b = offset_helper(a)
    return b * saved[0] + rows, saved


@target(
    category="graph breaks",
    args=x_only,
    inductor=True,
    knobs=(
        training_knob(),
        dtype_knob(),
        attr_knob("scale", 1.0, -0.5),
        attr_knob("act", Fresh("Tanh()", nn.Tanh), Fresh("ReLU()", nn.ReLU)),
        attr_knob(
            "fc2",
            Fresh("Linear(8, 3)", lambda: nn.Linear(8, 3)),
            Fresh("Linear(8, 3, bias=False)", lambda: nn.Linear(8, 3, bias=False)),
        ),
    ),
)
class BreakingNet(nn.Module):
    """A forward that breaks between submodules; what it reads after the break changes."""

    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 3)
        self.scale = 1.0

    def forward(self, x):
        h = self.fc1(x)
        zlib.crc32(b"between")  # break
        y = self.fc2(self.act(h)) * self.scale
        if self.training:
            y = y + 1
        return y


@target(
    category="graph breaks",
    args=aliased_pair,
    grad=False,
    alias=ALIASES,
    layouts=WRITABLE,
    knobs=(global_knob("GB_INPLACE_SHIFT", 1.0, -3.0),),
)
def inplace_across_break(a, b):
    """Inputs written before the break are read by the unsupported code and after it."""
    a.mul_(2)
    positive = (a > 0).any().item()  # break: reads the written input
    b.add_(GB_INPLACE_SHIFT if positive else -GB_INPLACE_SHIFT)
    return a + b, positive


def x_list_dict(spec, gen, shape):
    return rand(spec, gen, *shape), [1], {"rows": 0}


@target(
    category="graph breaks",
    args=x_list_dict,
    knobs=(global_knob("GB_JSON_MODE", "sum", "product"),),
)
def containers_across_break(x, log, d):
    """A list and a dict input written before the break: the unsupported code must see them."""
    log.append(x.shape[0])
    d["rows"] = x.shape[0]
    d["mode"] = GB_JSON_MODE
    y = x.sin()
    text = json.dumps({"log": log, "d": d})  # break: the standard library reads both
    log.append(len(text))
    d.pop("rows")
    return y * len(text), text


def fresh_break_mutates_global():
    GB_SEEN.clear()
    return break_mutates_global


@target(
    category="graph breaks",
    build=fresh_break_mutates_global,
    args=x_only,
    threads=False,
    touched=("GB_SEEN",),
    knobs=(global_knob("GB_SEEN_SCALE", 1.0, -2.0),),
)
def break_mutates_global(x):
    """The unsupported code writes a global that the resumed part reads."""
    y = x.cos()
    bisect.insort(GB_SEEN, x.shape[0])  # break: the standard library writes the list
    del GB_SEEN[:-2]
    return y * GB_SEEN[0] + len(GB_SEEN) * GB_SEEN_SCALE


@target(
    category="graph breaks",
    args=x_only,
    grad=False,
    alias=("transposed",),
    layouts=WRITABLE,
    inductor=True,
    knobs=(global_knob("GB_VIEW_SHIFT", 1.0, -3.0),),
)
def views_across_break(x):
    """Views of an input made before the break and written after it: the resume function's
    inputs alias each other (``row`` and ``col`` share an element) and the input."""
    row, col = x[0], x[:, 1]
    zlib.crc32(b"views")  # break
    row.mul_(2)
    col.add_(GB_VIEW_SHIFT)
    return x.sum(0), row, col


@target(
    category="graph breaks",
    args=x_and_w,
    inductor=True,
    knobs=(global_knob("GB_HEAD_SCALE", 1.0, -2.0),),
)
def intermediate_across_break(x, w):
    """An intermediate from the first graph is written in place (through a view too) by the
    resumed part, with gradients (``test_graph_break_soundness.py``)."""
    h = x @ w
    head = h[:, :2]
    zlib.crc32(b"intermediate")  # break
    head.mul_(GB_HEAD_SCALE)
    h.add_(x.sum(-1, keepdim=True))
    return h.tanh(), head


def make_iteration_across_break():
    factor = 2.0

    def iteration_across_break(xs):
        """A zip iterator live across the break in each iteration; a closure cell read after it.
        (A function the frame defines, live across a break, runs the whole frame eagerly.)"""
        out = []
        for t, i in zip(xs, range(len(xs))):
            zlib.crc32(b"item")  # break
            out.append(t * factor + i)
        return out, i

    return iteration_across_break


TARGETS.append(
    Target(
        name="iteration_across_break",
        category="graph breaks",
        build=make_iteration_across_break,
        args=tensor_list,
        shapes=((2,), (3,)),
        knobs=(cell_knob("factor", 2.0, -0.5),),
    )
)


class Options:
    def __init__(self):
        self.scale = 1.0


GB_OPTIONS = Options()


def x_and_overrides(spec, gen, shape):
    pick = torch.randint(0, 2, (), generator=gen).item()
    return rand(spec, gen, *shape), ({}, {"scale": 3.0})[pick]


@target(
    category="graph breaks",
    args=x_and_overrides,
    threads=False,
    knobs=(
        Knob(
            "GB_OPTIONS.scale", (1.0, 2.0), lambda _fn, value: setattr(GB_OPTIONS, "scale", value)
        ),
    ),
)
def break_sets_attribute(x, overrides):
    """The unsupported code sets attributes that the resumed part reads (each side sets the
    same ones, so they need no restoring between the compiled call and its twin)."""
    y = x * 2
    vars(GB_OPTIONS).update(overrides)  # break: vars() of a user object
    return y * GB_OPTIONS.scale


# ---------------------------------------------------------------------------
# A compiled target with its eager twin, and the mutations between its calls.


@dataclasses.dataclass
class Program:
    target: Target
    compiled: Any  # what the fuzz calls compiled (a list of them with compile_each)
    eager: Any  # the eager twin: the same function, or a deep copy of the module
    orig: nn.Module | None  # the module compile() was given
    sides: list  # what a knob value is set on: the function; or each compiled module and its twin
    spec: Spec
    knobs: dict[str, Any]  # each knob's current value
    calls: int = 0
    history: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def build(cls, target: Target, backend: str, seed: int, dynamic: bool | None = None) -> Program:
        with torch.random.fork_rng(devices=[]), default_dtype(F32):
            torch.manual_seed(seed)
            obj = target.build()
        spec = Spec(dtype=target.dtypes[0])
        knobs = {k.name: k.values[0] for k in target.knobs}
        if not isinstance(obj, nn.Module):
            for k in target.knobs:
                k.apply(obj, resolve(k.values[0]))
            compiled = torchkiln.compile(obj, backend=backend, dynamic=dynamic)
            return cls(target, compiled, obj, None, [obj], spec, knobs)
        twin = copy.deepcopy(obj)
        originals, twins = (list(obj), list(twin)) if target.compile_each else ([obj], [twin])
        for k in target.knobs:  # before compiling: hooks registered on the module, say
            for side in originals + twins:
                k.apply(side, resolve(k.values[0]))
        compiled = [torchkiln.compile(m, backend=backend, dynamic=dynamic) for m in originals]
        sides = [side for pair in zip(compiled, twins) for side in pair]
        return cls(
            target, compiled if target.compile_each else compiled[0], twin, obj, sides, spec, knobs
        )

    def changed_knobs(self) -> str:
        """The knobs away from their initial value, as ``name=value``."""
        initial = {k.name: k.values[0] for k in self.target.knobs}
        changed = [f"{n}={v!r}" for n, v in self.knobs.items() if v is not initial[n]]
        return ",".join(changed) or "-"

    def set_knob(self, knob: Knob, value: Any) -> None:
        self.knobs[knob.name] = value
        for side in self.sides:
            knob.apply(side, resolve(value))
        if knob.name == "to(dtype)":
            self.spec.dtype = value


def resolve(value: Any) -> Any:
    return value() if isinstance(value, Fresh) else value


MUTATION_WEIGHTS = {
    "shape": 1.0,
    "dtype": 1.0,
    "requires_grad": 1.0,
    "inference_inputs": 1.0,
    "alias": 2.0,
    "layout": 1.5,
    "global_state": 2.0,
    "knob": 3.0,
    "threads": 0.5,
    "config": 0.15,
    "mark": 1.0,
}
FOCUS = 3.0  # weight multiplier of the classes a target is built to expose
P_MUTATE = 0.45  # a call is preceded by mutations with this probability
P_DRIFT_BACK = 0.3  # each changed dimension goes back to its initial value with this probability


def weights(target: Target) -> dict[str, float]:
    """The mutation classes that apply to ``target``, weighted."""
    usable = {
        "shape": len(target.shapes) > 1,
        "dtype": len(target.dtypes) > 1 and not any(k.name == "to(dtype)" for k in target.knobs),
        "requires_grad": target.grad,
        "inference_inputs": target.inference_inputs,
        "alias": bool(target.alias),
        "layout": bool(target.layouts),
        "global_state": True,
        "knob": bool(target.knobs),
        "threads": target.threads,
        "config": True,
        "mark": bool(target.shapes[0]),
    }
    focus = {"knob", "alias"}
    if target.category == "global torch state":  # grad mode matters with inputs that require grad
        focus |= {"global_state", "requires_grad"}
    if target.category == "layout":
        focus |= {"layout"}
    if target.category == "symbolic sizes":
        focus |= {"shape", "mark"}
    return {
        name: w * (FOCUS if name in focus else 1.0)
        for name, w in MUTATION_WEIGHTS.items()
        if usable[name]
    }


def other(rng: random.Random, values: Sequence, current: Any) -> Any:
    """A value of ``values`` other than ``current``: every mutation changes something."""
    return rng.choice([v for v in values if v is not current and v != current])


def mutate(rng: random.Random, prog: Program, env: Env) -> tuple[list[str], int]:
    """Change things before ``prog``'s next call. Returns what changed and how many threads call (0: none)."""
    target, spec, done = prog.target, prog.spec, []
    env.cache_size_limit = None
    threads = 0
    # drift back: each changed dimension returns to its initial value now and then
    for field, values in ENV_VALUES.items():
        if getattr(env, field) != values[0] and rng.random() < P_DRIFT_BACK:
            setattr(env, field, values[0])
            done.append(f"{field}={short(values[0])}")
    for knob in target.knobs:
        if prog.knobs[knob.name] is not knob.values[0] and rng.random() < P_DRIFT_BACK:
            prog.set_knob(knob, knob.values[0])
            done.append(f"{knob.name}={knob.values[0]!r}")
    if spec.alias != "distinct" and rng.random() < P_DRIFT_BACK:
        spec.alias = "distinct"
        done.append("alias=distinct")
    if spec.layout != "contiguous" and rng.random() < P_DRIFT_BACK:
        spec.layout = "contiguous"
        done.append("layout=contiguous")
    if spec.mark is not None and rng.random() < P_DRIFT_BACK:
        spec.mark = None
        done.append("mark=None")
    if len(target.shapes) > 2 and spec.shape != 0 and rng.random() < P_DRIFT_BACK:
        spec.shape = 0  # with two shapes the next change goes back anyway
        done.append(f"shape={target.shapes[0]}")
    if prog.calls == 0:  # a first call from several threads at once, or with a config change
        if rng.random() < 0.05:
            env.cache_size_limit = 0
            done.append("config.cache_size_limit=0 (this call)")
        return done, rng.choice((2, 4, 8)) if target.threads and rng.random() < 0.2 else 0
    if rng.random() >= P_MUTATE:
        return done, 0
    classes = weights(target)
    for kind in rng.choices(list(classes), list(classes.values()), k=rng.choice((1, 1, 2))):
        if kind == "shape":
            spec.shape = other(rng, range(len(target.shapes)), spec.shape)
            done.append(f"shape={target.shapes[spec.shape]}")
        elif kind == "dtype":
            spec.dtype = other(rng, target.dtypes, spec.dtype)
            done.append(f"dtype={short(spec.dtype)}")
        elif kind == "requires_grad":
            spec.requires_grad = not spec.requires_grad
            spec.inference_inputs = spec.inference_inputs and not spec.requires_grad
            done.append(f"requires_grad={spec.requires_grad}")
        elif kind == "inference_inputs":
            spec.inference_inputs = not spec.inference_inputs
            spec.requires_grad = spec.requires_grad and not spec.inference_inputs
            done.append(f"inference_inputs={spec.inference_inputs}")
        elif kind == "alias":
            spec.alias = other(rng, ("distinct", *target.alias), spec.alias)
            done.append(f"alias={spec.alias}")
        elif kind == "layout":
            spec.layout = other(rng, ("contiguous", *target.layouts), spec.layout)
            done.append(f"layout={spec.layout}")
        elif kind == "global_state":
            field = rng.choice(list(ENV_VALUES))
            setattr(env, field, other(rng, ENV_VALUES[field], getattr(env, field)))
            done.append(f"{field}={short(getattr(env, field))}")
        elif kind == "knob":
            knob = rng.choice(target.knobs)
            value = other(rng, knob.values, prog.knobs[knob.name])
            prog.set_knob(knob, value)
            done.append(f"{knob.name}={value!r}")
        elif kind == "threads":
            threads = rng.choice((2, 4, 8))
        elif kind == "config":
            env.cache_size_limit = 0
            done.append("config.cache_size_limit=0 (this call)")
        elif kind == "mark":
            spec.mark = random_mark(rng, target, target.shapes[spec.shape])
            done.append(f"mark={spec.mark}")
    return done, threads


def random_mark(rng: random.Random, target: Target, shape: tuple) -> Mark:
    """A mark of one dimension of the first input: bounds around its size now (some that a
    later shape leaves), or a static or maybe-dynamic mark."""
    dim = rng.randrange(len(shape))
    kind = rng.choice(("dynamic", "dynamic", "maybe", "static"))
    size = shape[dim]
    if kind != "dynamic" or size < 2:
        return Mark("maybe" if kind == "dynamic" else kind, dim)
    largest = max(s[dim] for s in target.shapes if len(s) > dim)
    low = rng.choice((None, 2, size))
    high = rng.choice((None, size, size + 1, max(largest, size)))
    return Mark(kind, dim, low, high)


# ===========================================================================
# Symbolic sizes (dynamic shapes). Targets whose results depend on size arithmetic: views
# from sizes, sizes as Python ints in branches and loops, slices and pads by sizes,
# broadcasting of size 1 against size n, pieces whose number depends on a size. Their shapes
# take several values (1 and 0 among them) and drift back to the first; under
# ``dynamic=True`` or marks, symbolic guards (``s0 > 4``, ``Eq(s1, s0)``, 0/1
# specialization, ``(-s0) % 8``) decide which entry serves a call: a wrong one shows here.
# ===========================================================================

HEAD_DIM = 4


@target(
    category="symbolic sizes",
    args=x_only,
    shapes=((2, 3, 8), (1, 3, 8), (4, 5, 16), (3, 0, 8), (2, 1, 8), (2, 6, 24)),
    inductor=True,
)
def heads_view(x):
    """Heads split off the last dimension (``h = c // d``), attention over ``t``, merged back;
    sizes returned as Python ints."""
    b, t, c = x.shape
    h = c // HEAD_DIM
    q = x.reshape(b, t, h, HEAD_DIM).transpose(1, 2)
    scores = (q @ q.transpose(-1, -2) / math.sqrt(HEAD_DIM)).softmax(-1)
    merged = (scores @ q).transpose(1, 2).reshape(b, t, c)
    return merged * len(x), x.contiguous().view(b, t * c).sum(-1), h * t


@target(
    category="symbolic sizes",
    args=x_only,
    shapes=((5, 3), (2, 3), (1, 3), (0, 3), (8, 2), (6, 4), (3, 1)),
    inductor=True,
)
def size_branches(x):
    """Branches and loops on sizes, ``arange`` and slices by sizes."""
    n = x.shape[0]
    if n > 4:
        y = x[: n // 2] * 2
    elif n >= 2:
        y = x.flip(0)
    else:
        y = x + 1
    for i in range(x.size(1)):
        y = y + i * n
    return y, torch.arange(n) * 2, n * 2, len(x), x[n // 3 :].sum(0)


@target(
    category="symbolic sizes",
    args=x_only,
    shapes=((2, 8), (2, 5), (3, 13), (1, 16), (0, 7), (2, 1)),
    inductor=True,
)
def pad_to_multiple(x):
    """Pads the last dimension to a multiple of 8 (``(-n) % 8``) and sums blocks of 8."""
    n = x.shape[-1]
    pad = (-n) % 8
    y = torch.nn.functional.pad(x, (0, pad))
    blocks = y.reshape(x.shape[0], (n + pad) // 8, 8).sum(-1)
    half = torch.cat([x, x[..., : n // 2].flip(-1)], -1)
    return blocks, half, pad, y.shape[-1] % 8 == 0


def rows_pair(spec, gen, shape):
    """``x`` of ``(n, m)``, ``y`` of ``(k, m)``: ``k`` is 1, ``n`` or neither."""
    n, m, k = shape
    return rand(spec, gen, n, m), rand(spec, gen, k, m)


@target(
    category="symbolic sizes",
    args=rows_pair,
    shapes=((3, 4, 1), (3, 4, 3), (1, 4, 1), (5, 2, 5), (5, 2, 1), (4, 3, 2), (0, 3, 1)),
)
def broadcast_pair(x, y):
    """Size 1 broadcasts, size n matches, anything else takes another branch: a graph for
    ``k == n`` (one symbol for both) must not serve ``k != n``."""
    both = torch.cat([x, y * 2])
    if y.shape[0] in (1, x.shape[0]):
        z = x + y
    else:
        z = x - y.mean(0)
    return z, both, y[:1].expand(x.shape[0], -1) * 3, x.shape[0] * y.shape[0]


@target(
    category="symbolic sizes",
    args=x_only,
    shapes=((6, 2), (7, 2), (2, 2), (1, 2), (0, 2), (9, 3), (4, 3)),
)
def split_pieces(x):
    """``split(3)`` gives ``ceil(n / 3)`` pieces: the number of outputs depends on a size."""
    pieces = x.split(3)
    parts = [p.sum(0) * i for i, p in enumerate(pieces)]
    padded = torch.cat([x, x.new_zeros(x.shape[0] % 3, x.shape[1])])
    return parts, padded, len(pieces), x.new_ones(x.shape[0] * 2, 1) + x.sum()


@target(
    category="symbolic sizes",
    args=x_only,
    shapes=((2, 5, 4), (1, 5, 4), (2, 12, 4), (3, 1, 4), (2, 0, 4), (1, 7, 4)),
    knobs=(attr_knob("window", 3, 1, 5),),
)
class PositionalNet(nn.Module):
    """A positional table sliced by the sequence length (a parameter: never dynamic) and a
    sliding window of ``min(window, t)``."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(12, 4))
        self.window = 3

    def forward(self, x):
        t = x.shape[1]
        h = x + self.pos[:t]
        if t >= 2:
            local = h.unfold(1, min(self.window, t), 1).mean(-1)
        else:
            local = h * 2
        return h.cumsum(1), local


@target(
    category="symbolic sizes",
    args=x_only,
    shapes=((4, 3), (5, 3), (1, 3), (0, 3), (2, 3), (7, 2)),
    grad=False,
    layouts=WRITABLE,
    alias=("transposed",),
)
def size_slice_views(x):
    """Writes a slice of the input at an offset that is a size (``n // 2`` rows in) and returns
    views of it: their offsets and the aliasing are symbolic."""
    n = x.shape[0]
    head, tail = x[: n // 2], x[n // 2 :]
    tail.add_(1)
    x.narrow(0, 0, n - n // 2).mul_(2)
    return head, tail, x[n - 1 :], x.reshape(-1)[: x.numel() // 2]


# End of the symbolic sizes section.
