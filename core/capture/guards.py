"""Guards: what must hold for a cache entry to be valid, generated as straight-line Python.

Capture records one guard per assumption (a type, an identity, a constant,
a tensor's metadata, grad mode...) as a Python boolean expression over the
entry's sources. ``GuardSet.compile`` turns them into two functions that
share one namespace with the transformed code:

- ``guard(___fn, *locals) -> bool``: every check ``and``-ed, cheapest first;
  it runs on every call, so it is one expression and nothing else, each long
  source read once (``hoist``), a model's layers through their ``__dict__``
  (``GuardSet.module``);
- ``first_failure(___fn, *locals) -> str | None``: the same checks one by one,
  run only on a cache miss to say which guard failed (``recompiles`` log).

Add a guard kind by adding a method to ``GuardSet`` that emits an expression.

A ``GuardSet`` also notes what another process needs to rebuild its namespace
(``persist``): the source each identity-guarded object was read through
(``pins``), whose closure each bound cell is (``cell_owners``), which class
each bound keys view shows (``class_keys``), and the source files of the code
the translation read (``code_files``).
"""

from __future__ import annotations

import collections
import enum
import math
import re
import types
import weakref
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._device import DeviceContext

from torchkiln import config
from torchkiln.capture import guard_program, native
from torchkiln.disk_cache import Uncacheable, stable_name

#: A name that may start a source (group 1), or a string literal to skip over.
_ROOT_OR_STRING = re.compile(r"(?<![\w.])([A-Za-z_]\w*)|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
#: One step of a source: ``.attr`` or ``[key]`` with a literal key.
_ACCESS = re.compile(r"\.[A-Za-z_]\w*|\[(?:'[^']*'|\"[^\"]*\"|-?\d+)\]")

#: Cost classes: guards run in this order so that cheap checks fail first.
COST_TYPE, COST_ID, COST_VALUE, COST_TENSOR, COST_GLOBAL_STATE = range(5)

#: What ``nn.Module`` keeps in each instance's ``__dict__`` that guards read on every call.
MODULE_STATE = (
    "training", "_modules", "_parameters", "_buffers",
    "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
)  # fmt: skip


#: Tensor types whose metadata the C++ checks read as Python does (no ``__torch_function__``).
_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)

#: The name of the C++ guard program in a guard function's namespace (``guard_program``).
NATIVE_GUARD = "___native_guard"


@dataclass(frozen=True)
class Guard:
    expr: str
    cost: int
    description: str
    #: A check of a tensor's metadata the C++ checker can make instead: ``(source, dtype,
    #: device, requires_grad, sizes, strides or None)``, the whole spec of that tensor.
    tensor: tuple | None = None


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
        #: Module sources, with the attributes the guard function reads from their
        #: ``__dict__`` (``module``); the classes of those modules, with the attributes;
        #: and the name of the keys view of each class ``_dict_read_guards`` checks, by
        #: the name of the class (``persist`` rebuilds one from the other).
        self.module_dicts: dict[str, set[str]] = {}
        self._module_classes: dict[str, type] = {}
        self._dict_reads: dict[type, set[str]] = {}
        self.class_keys: dict[str, str] = {}
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

    def add(self, expr: str, cost: int, description: str, tensor: tuple | None = None) -> None:
        if expr not in self.guards:
            self.guards[expr] = Guard(expr, cost, description, tensor)

    def type_is(self, source: str, cls: type) -> str:
        """Guard ``type(source) is cls``; returns the name ``cls`` is bound to."""
        self._sources.add(source)
        name = self.bind(cls, "T")
        self.add(f"type({source}) is {name}", COST_TYPE, f"type({source}) is {cls.__qualname__}")
        return name

    def identity(self, source: str, value: Any, described: str | None = None) -> None:
        """``source`` is ``value``. An object that may die before the program ends (a closure,
        a local class) is held weakly, so that the cache does not keep it alive: the guard
        compares ids, and the entry is dropped when the object dies (``on_death``), before
        another object can reuse its id. ``described``: the source as the description says it."""
        self._sources.add(source)
        what = getattr(value, "__qualname__", None) or type(value).__name__
        if _lives_on(value):
            name = self.bind(value, "id")
            expr = f"{source} is {name}"
        else:
            name = self.hold_weakly(value)
            expr = f"id({source}) == {name}"
        self.pins.setdefault(name, source)
        self.add(expr, COST_ID, f"{described or source} is the same {what} object")

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

    def read_once(self, source: str) -> None:
        """Have the guard function read ``source`` once for all the guards that read it."""
        self._sources.add(source)

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
        submodules, parameters and buffers as graph inputs, member names where iterated).

        An attribute load on a module is slow (``nn.Module.__getattr__`` keeps CPython
        from specializing it), and a model's guards read thousands: the guard function
        reads ``MODULE_STATE`` and the attributes ``module_attr`` names from
        ``source.__dict__`` instead, read once, where that is the same read
        (``_dict_read_guards``).
        """
        self.type_is(source, type(module))
        self.add(
            f"{source}.training is {module.training!r}",
            COST_VALUE,
            f"{source}.training is {module.training!r}",
        )
        if _reads_instance_dict(type(module), MODULE_STATE):
            self.module_dicts[source] = {"__dict__", *MODULE_STATE}
            self._module_classes[source] = type(module)
            self._dict_reads.setdefault(type(module), set()).update(MODULE_STATE)

    def module_attr(self, source: str, module: torch.nn.Module, name: str) -> None:
        """``source.name`` was read from ``module``'s ``__dict__``: have the guard function
        read it from there too, where no class of ``module`` defines ``name``."""
        if source in self.module_dicts and _reads_instance_dict(type(module), (name,)):
            self.module_dicts[source].add(name)
            self._dict_reads[type(module)].add(name)

    def _dict_read_guards(self) -> None:
        """What makes ``obj.name`` read ``obj.__dict__['name']`` on the modules of each
        class in ``_dict_reads``: the class's bases are the same, and none of them defines
        ``name`` (a data descriptor would win over the instance dict) or
        ``__getattribute__``. Classes are patched at run time, so this is checked on every
        call, once per class: each one's keys are a view bound here. ``object``'s own
        attributes cannot change, nor can a class's ``__dict__`` descriptor.

        That pays where a class has several instances (a model's layers); a class with
        one (the model itself, whose bases may be many mixins) keeps attribute loads."""
        instances = collections.Counter(self._module_classes.values())
        for source, cls in self._module_classes.items():
            if instances[cls] < 2:
                self.module_dicts.pop(source, None)
                self._dict_reads.pop(cls, None)
        names: dict[type, set[str]] = {}
        for cls, read in self._dict_reads.items():
            bases = [self.bind(k, "T") for k in cls.__mro__]
            self.add(
                f"{bases[0]}.__mro__ == ({', '.join(bases)})",
                COST_VALUE,
                f"the bases of {cls.__qualname__} are unchanged",
            )
            for k in cls.__mro__[:-1]:
                names.setdefault(k, {"__getattribute__"}).update(read)
        for k, read in names.items():
            owner = self.bind(k, "T")
            keys = self.class_keys.get(owner) or self.bind(k.__dict__.keys(), "keys")
            self.class_keys[owner] = keys
            self.add(
                f"{keys}.isdisjoint({tuple(sorted(read))!r})",
                COST_VALUE,
                f"{k.__qualname__} defines none of {', '.join(sorted(read))}",
            )

    def tensor(self, source: str, t: torch.Tensor, fake: torch.Tensor | None = None) -> None:
        """Type, dtype, device, requires_grad, sizes and (``config.guard_strides``) strides;
        the sizes ``fake`` has symbolic are guarded by the ShapeEnv's facts instead."""
        self._sources.add(source)
        self.type_is(source, type(t))
        symbolic = fake is not None and any(isinstance(s, torch.SymInt) for s in fake.shape)
        spec = None  # what the C++ checker checks instead of these guards, where it can
        if not symbolic and type(t) in _PLAIN_TENSOR_TYPES and t.layout == torch.strided:
            strides = tuple(t.stride()) if config.guard_strides else None
            spec = (source, t.dtype, t.device, t.requires_grad, tuple(t.shape), strides)
        self.add(
            f"{source}.dtype is {self.bind(t.dtype, 'dtype')}",
            COST_TENSOR,
            f"{source}.dtype is {t.dtype}",
            spec,
        )
        self.add(
            _device_check(source, t.device, self),
            COST_TENSOR,
            f"{source}.device == {t.device}",
            spec,
        )
        self.add(
            f"{source}.requires_grad is {t.requires_grad!r}",
            COST_TENSOR,
            f"{source}.requires_grad is {t.requires_grad!r}",
            spec,
        )
        if symbolic:
            self._symbolic_sizes(source, fake)
            return
        self.exact_layout(source, t, strides=config.guard_strides, spec=spec)

    def exact_layout(
        self, source: str, t: torch.Tensor, strides: bool = True, spec: tuple | None = None
    ) -> None:
        """``source`` has ``t``'s very sizes (and strides), whichever dimensions are symbolic.
        ``spec``: the C++ checker's spec of ``source`` (``tensor``), which covers these."""
        size = tuple(t.shape)
        # ``.shape``: the same ``torch.Size`` as ``.size()``, read without a method call
        self.add(f"{source}.shape == {size!r}", COST_TENSOR, f"{source}.size() == {size}", spec)
        if strides:
            stride = tuple(t.stride())
            self.add(
                f"{source}.stride() == {stride!r}",
                COST_TENSOR,
                f"{source}.stride() == {stride}",
                spec,
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

    def shape_guards(self, lenient: bool = False) -> None:
        """Add the ShapeEnv's facts over symbolic sizes (``s0 >= 2``, ``s0 % 8 == 0``);
        ``lenient``: those that print (``ShapeGuards.expressions``)."""
        if self.shapes is not None:
            for expr, description in self.shapes.expressions(config.guard_strides, lenient):
                self.add(expr, COST_TENSOR, description)
            if lenient:
                return  # the entry runs the frame as written: no graph assumes them
            for check, symbols, description in self.shapes.predicates:
                call = f"{self.bind(check, 'sizes')}({self.shapes.size_args(symbols)})"
                self.add(call, COST_TENSOR, description)

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
        return [hoist(g.expr, self._sources, names, self.module_dicts) for g in ordered]

    def source(self, params: str) -> str:
        """The text of the guard and first-failure functions (``TORCHKILN_LOGS=guards``)."""
        self.shape_guards()
        self._dict_read_guards()
        guard, failure = self._function_texts(params)
        return f"{guard}\n{failure}"

    def _with_native_checks(self, params: str) -> list[str] | None:
        """The guard function's checks with those the C++ program makes (``guard_program``)
        folded into one call of it, where the first of them was, and the rest hoisted
        (``hoist``) among themselves; None where there is no program (turned off, not
        built yet, or no guard it can check).

        The program stops at its first failing check, as the Python ``and`` chain does;
        the checks left in Python run after it (a guard's order only decides which check
        fails first, and a read that raises fails the guard either way)."""
        checks = native.module()
        if checks is None:
            return None
        ordered = self.ordered()
        translated = guard_program.translate(
            [(g.expr, g.tensor) for g in ordered],
            params.split(", "),
            self.ns,
            self.module_dicts,
            checks.guard_program,
        )
        if translated is None:
            return None
        self.ns[NATIVE_GUARD], in_program = translated
        call = f"{NATIVE_GUARD}({params})"
        texts: list[str] = []
        names: dict[str, str] = {}
        for guard, folded in zip(ordered, in_program, strict=True):
            if not folded:
                texts.append(hoist(guard.expr, self._sources, names, self.module_dicts))
            elif call not in texts:
                texts.append(call)
        return texts

    def _function_texts(self, params: str) -> tuple[str, str]:
        """The guard function's text, and the first-failure function's: every check by
        itself, in the guard function's order."""
        exprs = self.hoisted_exprs()
        # each in parentheses: a guard may be an ``or`` (a ShapeEnv fact), which would split
        # the chain into two alternatives
        checks = self._with_native_checks(params) or exprs
        body = "\n        and ".join(f"({check})" for check in checks) or "True"
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

    def compile(self, params: str, filename: str, lenient: bool = False) -> tuple[Any, Any, str]:
        """Generate both functions; returns ``(guard, first_failure, source text)``.
        ``lenient``: for an entry that runs the frame in eager (``shape_guards``).

        ``first_failure`` is compiled on its first call: only a cache miss needs it,
        and compiling a frame's try/except per guard was most of a warm start's guard cost.
        """
        self.shape_guards(lenient)
        self._dict_read_guards()
        guard_text, failure_text = self._function_texts(params)
        ns = self.ns
        ns["___descriptions"] = [g.description for g in self.ordered()]
        exec(compile(guard_text, filename, "exec"), ns)

        def first_failure(*args: Any) -> str | None:
            if "___first_failure" not in ns:
                exec(compile(failure_text, filename, "exec"), ns)
            return ns["___first_failure"](*args)

        return ns["___guard"], first_failure, f"{guard_text}\n{failure_text}"


def hoist(
    expr: str,
    named: Container[str],
    names: dict[str, str],
    module_dicts: Mapping[str, Container[str]] = types.MappingProxyType({}),
) -> str:
    """``expr`` with every source in ``named`` reached through ``.attr`` / ``[key]`` read into a
    name on first read (``names``: source -> name, shared by the expressions of one function).

    On a source in ``module_dicts``, ``.__dict__`` and the attributes it names are read from
    its ``__dict__``, itself read once (``GuardSet.module`` says why they may)."""
    out, pos = [], 0
    for token in _ROOT_OR_STRING.finditer(expr):
        if token.start() < pos or token.group(1) is None:
            continue  # inside a source already rewritten, or a string literal
        source = text = token.group(1)
        end = token.end()
        rewritten = None  # (end in expr, text) of the last access read another way
        while access := _ACCESS.match(expr, end):
            step, end = access.group(), access.end()
            attr = step[1:]
            if attr in module_dicts.get(source, ()):
                text = _named(f"{source}.__dict__", f"{text}.__dict__", names)
                if attr != "__dict__":
                    text = _named(f"{source}{step}", f"{text}[{attr!r}]", names)
                source += step
            else:
                source += step
                text = _named(source, text + step, names) if source in named else text + step
            if text != expr[token.start() : end]:
                rewritten = end, text
        if rewritten is not None:
            out += [expr[pos : token.start()], rewritten[1]]
            pos = rewritten[0]
    out.append(expr[pos:])
    return "".join(out)


def _named(source: str, text: str, names: dict[str, str]) -> str:
    """``text`` (which reads ``source``) assigned to the name of ``source``, or that name
    where an earlier guard assigned it."""
    if source in names:
        return names[source]
    name = names[source] = f"___h{len(names)}"
    return f"({name} := {text})"


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


def _reads_instance_dict(cls: type, names: Iterable[str]) -> bool:
    """Whether ``obj.name`` is ``obj.__dict__['name']`` for ``cls``'s instances that have
    ``name``: no class in the MRO but ``object`` defines it or ``__getattribute__``, and
    ``obj.__dict__`` is the instance dict (the class that defines ``__dict__`` first holds
    Python's own descriptor for it)."""
    mro = cls.__mro__
    owner = next((k for k in mro if "__dict__" in k.__dict__), None)
    descriptor = owner.__dict__["__dict__"] if owner is not None else None
    return (
        mro[-1] is object
        and type(descriptor) is types.GetSetDescriptorType
        and descriptor.__objclass__ is owner
        and all(k.__dict__.keys().isdisjoint((*names, "__getattribute__")) for k in mro[:-1])
    )


def _has_loose_float(value: tuple) -> bool:
    """Whether ``value`` holds a float that ``==`` does not pin down: a zero (``0.0 == -0.0``)
    or nan (``nan != nan``), so the tuple is guarded item by item."""
    return any(
        (type(v) is float and (v == 0.0 or v != v)) or (type(v) is tuple and _has_loose_float(v))
        for v in value
    )


def _device_check(source: str, device: torch.device, guards: GuardSet) -> str:
    """The cheapest exact device test: ``is_cpu`` on the CPU; elsewhere one comparison
    (``is_cuda and get_device() == i``, two calls, measured slower than building a device)."""
    if device.type == "cpu":
        return f"{source}.is_cpu"
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
