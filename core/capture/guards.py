"""Guards: what must hold for a cache entry to be valid, generated as straight-line Python.

Capture records one guard per assumption (a type, an identity, a constant,
a tensor's metadata, grad mode...) as a Python boolean expression over the
entry's sources. ``GuardSet.compile`` turns them into two functions that
share one namespace with the transformed code:

- ``guard(___fn, *locals) -> bool``: every check ``and``-ed, cheapest first;
  it runs on every call, so it is one expression and nothing else;
- ``first_failure(___fn, *locals) -> str | None``: the same checks one by one,
  run only on a cache miss to say which guard failed (``recompiles`` log).

Add a guard kind by adding a method to ``GuardSet`` that emits an expression.

A ``GuardSet`` also notes what another process needs to rebuild its namespace
(``persist``): the source each identity-guarded object was read through
(``pins``), whose closure each bound cell is (``cell_owners``), and the
source files of the code the translation read (``code_files``).
"""

from __future__ import annotations

import enum
import math
import re
import types
import weakref
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._device import DeviceContext

from torchkiln import config
from torchkiln.disk_cache import Uncacheable, stable_name

#: A name that may start a source (group 1), or a string literal to skip over.
_ROOT_OR_STRING = re.compile(r"(?<![\w.])([A-Za-z_]\w*)|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
#: One step of a source: ``.attr`` or ``[key]`` with a literal key.
_ACCESS = re.compile(r"\.[A-Za-z_]\w*|\[(?:'[^']*'|\"[^\"]*\"|-?\d+)\]")

#: Cost classes: guards run in this order so that cheap checks fail first.
COST_TYPE, COST_ID, COST_VALUE, COST_TENSOR, COST_GLOBAL_STATE = range(5)


@dataclass(frozen=True)
class Guard:
    expr: str
    cost: int
    description: str


class GuardSet:
    """The guards of one entry; ``ns`` is the namespace shared with the transformed code."""

    def __init__(self, ns: dict[str, Any]):
        self.ns = ns
        self.guards: dict[str, Guard] = {}
        self._bound: dict[int, str] = {}
        self._sources: set[str] = set()
        self.pins: dict[str, str] = {}
        self.cell_owners: dict[str, tuple[str, int]] = {}
        self.code_files: set[str] = set()
        #: Names in ``ns`` holding the ``id`` of an object guarded by identity but held
        #: weakly (``identity``), with its weak reference; ``on_death`` runs when one dies.
        self.weak: dict[str, weakref.ref] = {}
        self._weak_names: dict[int, str] = {}
        self.on_death: list[Callable[[], None]] = []
        #: The symbolic sizes of the inputs (``capture.symbolic.ShapeGuards``), if any.
        self.shapes: Any = None
        #: ``(guard exprs in order, their hoisted forms)`` a stored record brought along
        self._hoisted: tuple[tuple[str, ...], list[str]] | None = None

    def bind(self, value: Any, hint: str = "c") -> str:
        """A name in ``ns`` holding ``value`` (reused for the same object)."""
        name = self._bound.get(id(value))
        if name is None or self.ns[name] is not value:
            name = f"___{hint}{len(self.ns)}"
            self.ns[name] = value
            self._bound[id(value)] = name
        return name

    def literal(self, value: Any) -> str:
        """Source text for a constant: its ``repr`` when that reads back, else a bound name."""
        if type(value) in (str, int, bool, type(None)) or (
            type(value) is float and math.isfinite(value)
        ):
            return repr(value)
        return self.bind(value, "v")

    def add(self, expr: str, cost: int, description: str) -> None:
        if expr not in self.guards:
            self.guards[expr] = Guard(expr, cost, description)

    def type_is(self, source: str, cls: type) -> None:
        self._sources.add(source)
        self.add(
            f"type({source}) is {self.bind(cls, 'T')}",
            COST_TYPE,
            f"type({source}) is {cls.__qualname__}",
        )

    def identity(self, source: str, value: Any) -> None:
        """``source`` is ``value``. An object that may die before the program ends (a closure,
        a local class) is held weakly, so that the cache does not keep it alive: the guard
        compares ids, and the entry is dropped when the object dies (``on_death``), before
        another object can reuse its id."""
        self._sources.add(source)
        what = getattr(value, "__qualname__", None) or type(value).__name__
        if _lives_on(value):
            name = self.bind(value, "id")
            expr = f"{source} is {name}"
        else:
            name = self.hold_weakly(value)
            expr = f"id({source}) == {name}"
        self.pins.setdefault(name, source)
        self.add(expr, COST_ID, f"{source} is the same {what} object")

    def hold_weakly(self, value: Any, name: str | None = None) -> str:
        """A name in ``ns`` holding ``id(value)`` while ``value`` lives (reused for the same
        object); ``persist`` passes the name a record gave it."""
        if name is None:
            name = self._weak_names.get(id(value)) or f"___id{len(self.ns)}"
        self.ns[name] = id(value)
        self.weak[name] = weakref.ref(value, self._died)
        self._weak_names[id(value)] = name
        return name

    def _died(self, _ref: weakref.ref) -> None:
        callbacks, self.on_death = self.on_death, []
        for callback in callbacks:
            callback()

    def bind_cell(self, owner: Any, index: int) -> str:
        """A name for closure cell ``index`` of function ``owner`` (both kept in ``ns``)."""
        owner_name = self.bind(owner, "fn")  # first: another process rebuilds names in order
        name = self.bind(owner.__closure__[index], "cell")
        self.cell_owners.setdefault(name, (owner_name, index))
        return name

    def constant(self, source: str, value: Any) -> None:
        self._sources.add(source)
        if value is None or isinstance(value, (bool, enum.Enum)) or value is Ellipsis:
            if isinstance(value, enum.Enum):
                self.identity(source, value)
                return
            self.add(f"{source} is {value!r}", COST_ID, f"{source} is {value!r}")
            return
        self.type_is(source, type(value))
        if type(value) is tuple and _has_loose_float(value):
            self.length(source, len(value))
            for i, item in enumerate(value):
                self.constant(f"{source}[{i}]", item)
            return
        if isinstance(value, (int, str, bytes)) or (
            isinstance(value, float) and math.isfinite(value)
        ):
            self.add(f"{source} == {value!r}", COST_VALUE, f"{source} == {value!r}")
            if isinstance(value, float) and value == 0.0:  # ``0.0 == -0.0``, yet ``x / c`` differs
                sign = math.copysign(1.0, value)
                copysign = self.bind(math.copysign, "copysign")
                self.add(
                    f"{copysign}(1.0, {source}) == {sign!r}", COST_VALUE, f"{source} is {value!r}"
                )
        elif isinstance(value, float) and value != value:
            self.add(f"{source} != {source}", COST_VALUE, f"{source} is nan")
        else:
            self.add(f"{source} == {self.bind(value, 'v')}", COST_VALUE, f"{source} == {value!r}")

    @property
    def sources(self) -> frozenset[str]:
        """Every source a guard reads (``hoisted_exprs`` names them)."""
        return frozenset(self._sources)

    @classmethod
    def restored(
        cls,
        ns: dict[str, Any],
        guards: list[Guard],
        sources: frozenset[str],
        hoisted: list[str] | None = None,
    ) -> GuardSet:
        """The guard set another process recorded (``persist``), over a rebuilt namespace;
        ``hoisted``: its :meth:`hoisted_exprs`, so that loading does not rewrite them."""
        restored = cls(ns)
        restored.guards = {g.expr: g for g in guards}
        restored._sources = set(sources)
        if hoisted is not None:
            restored._hoisted = (tuple(g.expr for g in restored.ordered()), hoisted)
        return restored

    def length(self, source: str, n: int) -> None:
        self.add(f"len({source}) == {n}", COST_VALUE, f"len({source}) == {n}")

    def dict_keys(self, source: str, keys: list) -> None:
        self.add(f"list({source}) == {keys!r}", COST_VALUE, f"keys of {source} are {keys!r}")

    def module(self, source: str, module: torch.nn.Module) -> None:
        """Type and ``training``, not identity: instances of one class share entries. What
        the trace reads from a module is guarded through its own source (attributes,
        submodules, parameters and buffers as graph inputs, member names where iterated)."""
        self.type_is(source, type(module))
        self.add(
            f"{source}.training is {module.training!r}",
            COST_VALUE,
            f"{source}.training is {module.training!r}",
        )

    def tensor(self, source: str, t: torch.Tensor, fake: torch.Tensor | None = None) -> None:
        """Type, dtype, device, requires_grad, sizes and (``config.guard_strides``) strides;
        the sizes ``fake`` has symbolic are guarded by the ShapeEnv's facts instead."""
        self._sources.add(source)
        self.type_is(source, type(t))
        self.add(
            f"{source}.dtype is {self.bind(t.dtype, 'dtype')}",
            COST_TENSOR,
            f"{source}.dtype is {t.dtype}",
        )
        self.add(
            _device_check(source, t.device, self), COST_TENSOR, f"{source}.device == {t.device}"
        )
        self.add(
            f"{source}.requires_grad is {t.requires_grad!r}",
            COST_TENSOR,
            f"{source}.requires_grad is {t.requires_grad!r}",
        )
        if fake is not None and any(isinstance(s, torch.SymInt) for s in fake.shape):
            self._symbolic_sizes(source, fake)
            return
        self.exact_layout(source, t, strides=config.guard_strides)

    def exact_layout(self, source: str, t: torch.Tensor, strides: bool = True) -> None:
        """``source`` has ``t``'s very sizes (and strides), whichever dimensions are symbolic."""
        size = tuple(t.shape)
        # ``.shape``: the same ``torch.Size`` as ``.size()``, read without a method call
        self.add(f"{source}.shape == {size!r}", COST_TENSOR, f"{source}.size() == {size}")
        if strides:
            stride = tuple(t.stride())
            self.add(
                f"{source}.stride() == {stride!r}", COST_TENSOR, f"{source}.stride() == {stride}"
            )

    def _symbolic_sizes(self, source: str, fake: torch.Tensor) -> None:
        """The rank and static sizes now; the rest at ``compile`` (``shape_guards``), when
        tracing and the backend have added every fact they assume to the ShapeEnv."""
        from torchkiln.capture.symbolic import ShapeGuards

        if self.shapes is None:
            self.shapes = ShapeGuards(fake.fake_mode.shape_env)
        self.shapes.add_input(source, fake)
        self._sources.add(f"{source}.shape")  # read once per guard call (``hoisted_exprs``)
        self.add(f"{source}.dim() == {fake.dim()}", COST_TENSOR, f"{source}.dim() == {fake.dim()}")
        for dim, size in enumerate(fake.shape):
            if not isinstance(size, torch.SymInt):
                read = f"{source}.shape[{dim}]"
                self.add(f"{read} == {size}", COST_TENSOR, f"{read} == {size}")

    def shape_guards(self) -> None:
        """Add the ShapeEnv's facts over symbolic sizes (``s0 >= 2``, ``s0 % 8 == 0``)."""
        if self.shapes is not None:
            for expr, description in self.shapes.expressions(config.guard_strides):
                self.add(expr, COST_TENSOR, description)

    def grad_mode(self, enabled: bool) -> None:
        fn = self.bind(torch.is_grad_enabled, "grad")
        expr = f"{fn}()" if enabled else f"not {fn}()"
        self.add(expr, COST_GLOBAL_STATE, f"grad mode is {'enabled' if enabled else 'disabled'}")

    def torch_state(self) -> None:
        """Global torch state that changes what the graph computes, guarded as torch.compile does.

        Inference mode, deterministic algorithms, TF32 in float32 matmuls and convolutions
        (the inductor bakes it into attention rewrites and Triton templates) and autocast
        (per device: enabled, dtype; and its cache) are read at capture time by tracing and
        by backends that bake casts or kernels into compiled code. The common case costs
        one C call each.
        """
        inference = torch.is_inference_mode_enabled()
        self._state_flag(torch._C.is_inference_mode_enabled, inference, "inference mode")
        # no entry runs under a dispatch mode (``dispatch.on_miss`` runs the frame as written)
        self._state_flag(torch._C._len_torch_dispatch_stack, False, "torch dispatch modes")
        for query, what in (
            (torch._C._get_cublas_allow_tf32, "TF32 in float32 matmuls"),
            (torch._C._get_cudnn_allow_tf32, "TF32 in float32 convolutions"),
        ):
            self._state_flag(query, query(), what)
        deterministic = torch.are_deterministic_algorithms_enabled()
        self._state_flag(
            torch._C._get_deterministic_algorithms, deterministic, "deterministic algorithms"
        )
        if deterministic:
            self._state_flag(
                torch._C._get_deterministic_algorithms_warn_only,
                torch.is_deterministic_algorithms_warn_only_enabled(),
                "deterministic algorithms warn-only",
            )
        if not torch._C._is_any_autocast_enabled():
            self._state_flag(torch._C._is_any_autocast_enabled, False, "autocast")
            return
        state = autocast_state()
        fn = self.bind(autocast_state, "autocast")
        self.add(f"{fn}() == {state!r}", COST_GLOBAL_STATE, f"autocast state is {state}")

    def _state_flag(self, query: Any, value: bool, what: str) -> None:
        fn = self.bind(query, "state")
        expr = f"{fn}()" if value else f"not {fn}()"
        self.add(expr, COST_GLOBAL_STATE, f"{what} is {'enabled' if value else 'disabled'}")

    def state_query(self, fn: Any, args: tuple, kwargs: dict, value: Any) -> None:
        """A torch function that reads global state returned ``value``: guard that it still does."""
        name = self.bind(fn, "query")
        call_args = [self.literal(a) for a in args]
        call_args += [f"{k}={self.literal(v)}" for k, v in kwargs.items()]
        call = f"{name}({', '.join(call_args)})"
        self.add(f"{call} == {self.literal(value)}", COST_GLOBAL_STATE, f"{call} == {value!r}")

    def function_modes(self) -> None:
        """Torch function modes (``torch.set_default_device``'s, a user's) change what torch
        calls return, and tracing bakes their effect into the graph: guard the stack's mode
        types, as torch.compile does, and the default device by value. No mode: one C call."""
        stack = torch.overrides._get_current_function_mode_stack()
        if not stack:
            self._state_flag(torch._C._len_torch_function_stack, False, "torch function modes")
            return
        fn = self.bind(function_mode_types, "modes")
        names = ", ".join(self.bind(type(mode), "mode") for mode in stack)
        described = ", ".join(type(mode).__name__ for mode in stack)
        self.add(
            f"{fn}() == ({names},)", COST_GLOBAL_STATE, f"torch function modes are {described}"
        )
        if any(isinstance(mode, DeviceContext) for mode in stack):
            device = torch.get_default_device()
            fn = self.bind(torch.get_default_device, "default_device")
            self.add(
                f"{fn}() == {self.bind(device, 'dev')}",
                COST_GLOBAL_STATE,
                f"default device is {device}",
            )

    def default_dtype(self) -> None:
        dtype = torch.get_default_dtype()
        fn = self.bind(torch.get_default_dtype, "default_dtype")
        self.add(
            f"{fn}() is {self.bind(dtype, 'dtype')}", COST_GLOBAL_STATE, f"default dtype is {dtype}"
        )

    def ordered(self) -> list[Guard]:
        return sorted(self.guards.values(), key=lambda g: g.cost)

    def hoisted_exprs(self) -> list[str]:
        """The ordered guard expressions, each long source read once: ``(___h0 := L_self._modules['a'])``.

        Later guards (and longer sources that start with a hoisted one) use
        the name; guards run in order and stop at the first failure, so a
        name is always assigned before it is read. One left-to-right scan
        per expression, so the cost grows with the guards' text, not with
        guards x sources (a ResNet has thousands of both).
        """
        ordered = self.ordered()
        if self._hoisted is not None and self._hoisted[0] == tuple(g.expr for g in ordered):
            return list(self._hoisted[1])
        names: dict[str, str] = {}
        return [hoist(guard.expr, self._sources, names) for guard in ordered]

    def source(self, params: str) -> str:
        """The text of the guard and first-failure functions (``TORCHKILN_LOGS=guards``)."""
        self.shape_guards()
        guard, failure = self._function_texts(params)
        return f"{guard}\n{failure}"

    def _function_texts(self, params: str) -> tuple[str, str]:
        exprs = self.hoisted_exprs()
        body = "\n        and ".join(exprs) or "True"
        guard = f"def ___guard({params}):\n    return (\n        {body}\n    )\n"
        lines = [f"def ___first_failure({params}):"]
        for i, expr in enumerate(exprs):
            lines.append("    try:")
            lines.append(f"        if not ({expr}):")
            lines.append(f"            return ___descriptions[{i}]")
            lines.append("    except Exception as e:")
            lines.append(f"        return ___descriptions[{i}] + f' (raised {{type(e).__name__}})'")
        lines.append("    return None")
        return guard, "\n".join(lines) + "\n"

    def compile(self, params: str, filename: str) -> tuple[Any, Any, str]:
        """Generate both functions; returns ``(guard, first_failure, source text)``.

        ``first_failure`` is compiled on its first call: only a cache miss needs it,
        and compiling a frame's try/except per guard was most of a warm start's guard cost.
        """
        self.shape_guards()
        guard_text, failure_text = self._function_texts(params)
        ns = self.ns
        ns["___descriptions"] = [g.description for g in self.ordered()]
        exec(compile(guard_text, filename, "exec"), ns)

        def first_failure(*args: Any) -> str | None:
            if "___first_failure" not in ns:
                exec(compile(failure_text, filename, "exec"), ns)
            return ns["___first_failure"](*args)

        return ns["___guard"], first_failure, f"{guard_text}\n{failure_text}"


def hoist(expr: str, named: Container[str], names: dict[str, str]) -> str:
    """``expr`` with every source in ``named`` reached through ``.attr`` / ``[key]`` read into a
    name on first read (``names``: source -> name, shared by the expressions of one function)."""
    out, pos = [], 0
    for token in _ROOT_OR_STRING.finditer(expr):
        if token.start() < pos or token.group(1) is None:
            continue  # inside a source already rewritten, or a string literal
        root, end, prefix_ends = token.start(), token.end(), []
        while access := _ACCESS.match(expr, end):
            end = access.end()
            if expr[root:end] in named:
                prefix_ends.append(end)
        if not prefix_ends:
            continue
        text, done = "", root
        for stop in prefix_ends:  # parents first: ((___h0 := L_self.a).b)
            source = expr[root:stop]
            if source in names:
                text = names[source]
            else:
                name = names[source] = f"___h{len(names)}"
                text = f"({name} := {text}{expr[done:stop]})"
            done = stop
        out += [expr[pos:root], text]
        pos = prefix_ends[-1]
    out.append(expr[pos:])
    return "".join(out)


def access_prefixes(source: str) -> list[str]:
    """The ``.attr`` / ``[key]`` chains ``source`` starts with, shortest first, its root
    name excluded: ``a.b[0].c`` -> ``a.b``, ``a.b[0]``, ``a.b[0].c``."""
    root = _ROOT_OR_STRING.match(source)
    if root is None or root.group(1) is None:
        return []
    prefixes, end = [], root.end()
    while access := _ACCESS.match(source, end):
        end = access.end()
        prefixes.append(source[:end])
    return prefixes


def _lives_on(value: Any) -> bool:
    """Held strongly by an identity guard: a Python module, an enum member, what an import
    finds (module-level functions and classes), or an object that takes no weak reference."""
    if isinstance(value, (types.ModuleType, enum.Enum)):
        return True
    try:
        weakref.ref(value)
    except TypeError:
        return True
    try:
        stable_name(value)
    except Uncacheable:
        return False
    return True


def _has_loose_float(value: tuple) -> bool:
    """Whether ``value`` holds a float that ``==`` does not pin down: a zero (``0.0 == -0.0``)
    or nan (``nan != nan``), so the tuple is guarded item by item."""
    return any(
        (type(v) is float and (v == 0.0 or v != v)) or (type(v) is tuple and _has_loose_float(v))
        for v in value
    )


def _device_check(source: str, device: torch.device, guards: GuardSet) -> str:
    """The cheapest exact device test: ``is_cpu`` / ``get_device()`` avoid building a device object."""
    if device.type == "cpu":
        return f"{source}.is_cpu"
    if device.type == "cuda" and device.index is not None:
        return f"({source}.is_cuda and {source}.get_device() == {device.index})"
    return f"{source}.device == {guards.bind(device, 'dev')}"


def function_mode_types() -> tuple[type, ...]:
    """The types of the torch function modes on the stack, innermost last."""
    return tuple(type(mode) for mode in torch.overrides._get_current_function_mode_stack())


#: Device types whose autocast state ``autocast_state`` reads.
AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "mtia", "privateuseone")


def autocast_state() -> tuple:
    """Autocast as plain values (so the guard's text reads back): the cache flag, then
    ``(device, dtype name)`` for each device type where it is enabled."""
    enabled = tuple(
        (device, str(torch.get_autocast_dtype(device)))
        for device in AUTOCAST_DEVICES
        if torch.is_autocast_enabled(device)
    )
    return (torch.is_autocast_cache_enabled(), *enabled)
