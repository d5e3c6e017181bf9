"""The symbolic interpreter: CPython 3.11 to 3.13 bytecode → torch.fx graph.

``Translator`` executes a frame's instructions on variable trackers instead
of values: torch operations become graph nodes, Python-only computation
runs now, calls to Python functions are inlined by a child translator that
shares the ``OutputGraph``. Each opcode has a method named after it
(``LOAD_FAST``...); version differences come from ``bytecode_compat``.

Whatever cannot be captured raises ``Unsupported`` with the user's
``file:line``. The root translator counts the instructions it executed
(``steps``): ``frame_capture`` uses that count to stop at the same point on a
second pass and break the graph there (see ``graph_break.py``).
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import inspect
import operator
import sys
import types
from typing import Any

import torch

from torchkiln.capture import bytecode
from torchkiln.capture import bytecode_compat as bc
from torchkiln.capture import variables as V
from torchkiln.capture.builtins import fold
from torchkiln.capture.output_graph import OutputGraph
from torchkiln.capture.targets import is_stdlib
from torchkiln.capture.variables import exceptions
from torchkiln.capture.variables.exceptions import Raised
from torchkiln.capture.variables.functions import RealCellVariable
from torchkiln.exc import CaptureError, Unsupported

MAX_INLINE_DEPTH = 64
MAX_GENERATOR_ITEMS = 10_000

_BINARY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow, "@": operator.matmul,
    "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift,
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "@=": operator.imatmul,
    "&=": operator.iand, "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift,
    ">>=": operator.irshift,
}  # fmt: skip

_COMPARE = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, ">=": operator.ge,
}  # fmt: skip

_CO_GENERATOR_LIKE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class StopAtBreak(Exception):
    """Raised by the root translator when it reaches the step chosen for a graph break."""

    def __init__(self, translator: Translator):
        self.translator = translator


@functools.lru_cache(maxsize=4096)
def _instructions(code: types.CodeType) -> tuple[tuple[dis.Instruction, ...], dict[int, int]]:
    """``code``'s instructions and the index of each offset, read-only and shared."""
    instructions = bytecode.instructions(code)
    return instructions, {inst.offset: i for i, inst in enumerate(instructions)}


class Translator:
    """Interprets one code object on variable trackers; see the module docstring."""

    def __init__(
        self,
        output: OutputGraph,
        code: types.CodeType,
        f_globals: dict,
        globals_expr: str,
        f_locals: dict[str, V.VariableTracker],
        closure: list[V.VariableTracker],
        parent: Translator | None = None,
        break_step: int | None = None,
    ):
        self.output = output
        self.code = code
        output.guards.code_files.add(code.co_filename)
        self.f_globals = f_globals
        self.globals_expr = globals_expr
        self.locals = f_locals
        self.cells: dict[str, V.VariableTracker] = dict(zip(code.co_freevars, closure))
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.instructions, self.index_of = _instructions(code)
        self.stack: list[V.VariableTracker] = []
        self.ip = 0
        self.current: dis.Instruction | None = None
        self.kw_names: tuple[str, ...] = ()
        self.return_value: V.VariableTracker | None = None
        self.steps = 0
        self.break_step = break_step
        self.lineno = code.co_firstlineno
        self.is_generator = False
        self.yields = 0
        self.suspended: V.VariableTracker | None = None  # what a generator's ``yield`` handed out
        # the exception an ``except`` block of this frame (or its caller's) is handling
        self.handling: V.VariableTracker | None = None if parent is None else parent.handling

    # -- driving ------------------------------------------------------------------

    def location(self) -> str:
        return f"{self.code.co_filename}:{self.lineno}"

    def run(self) -> V.VariableTracker:
        """Execute until ``RETURN_VALUE`` (or a generator's next ``yield``); returns the returned
        tracker."""
        while self.return_value is None and self.suspended is None:
            inst = self.instructions[self.ip]
            self.current = inst
            if inst.positions is not None and inst.positions.lineno is not None:
                self.lineno = inst.positions.lineno
            if self.parent is None:
                self.steps += 1
                if self.steps == self.break_step:
                    raise StopAtBreak(self)
            self.ip += 1
            try:
                getattr(self, bc.opname(inst), self._unknown)(inst)
            except Raised as e:
                if not e.chained:  # Python chains a new exception to the one being handled
                    e.exc.set_context(self.handling)
                    e.chained = True
                if self.unwind(e.exc):
                    continue
                if e.location is None:
                    e.location = self.location()
                    e.args = (f"{e.reason} at {e.location}",)
                raise
            except Unsupported as e:
                if e.location is None:
                    e.location = self.location()
                    e.args = (f"{e.reason} at {e.location}",)
                raise
            except (StopAtBreak, CaptureError):
                raise
            except Exception as e:
                raise CaptureError(
                    f"torchkiln failed on {inst.opname} at {self.location()}: {type(e).__name__}: {e}"
                ) from e
        return self.return_value

    def resume_generator(
        self, sent: V.VariableTracker | None, thrown: V.VariableTracker | None = None
    ) -> V.VariableTracker | None:
        """A generator's next item: ``sent`` becomes the value of the ``yield`` it is suspended
        at (None to start it), or ``thrown`` is raised there (``throw()``); its code runs to the
        next ``yield``; None once it returned. An exception leaving its code finishes it."""
        if self.return_value is not None:
            if thrown is not None:
                raise Raised(thrown, f"throw() of {thrown.describe()} into a finished generator")
            return None
        try:
            if thrown is not None:
                if not self.unwind(thrown):
                    raise Raised(thrown, f"throw() of {thrown.describe()} into a generator")
            elif sent is not None:
                self.push(sent)
            self.run()
        except Raised as e:
            self.return_value = V.ConstantVariable(None)
            error = exceptions.stop_iteration_error(e.exc)
            if error is e.exc:
                raise
            raise Raised(error, "a generator raised StopIteration", chained=True) from None
        value, self.suspended = self.suspended, None
        return value

    def unwind(self, exc: V.VariableTracker) -> bool:
        """Hands ``exc``, raised by the current instruction, to the handler the exception table
        names for it (stack cut to the handler's depth, ``lasti`` and ``exc`` pushed), as
        CPython does; False if no handler of this frame covers the instruction."""
        entry = bytecode.handler_entry(self.code, self.current.offset)
        if entry is None:
            return False
        target, depth, lasti = entry
        del self.stack[depth:]
        if lasti:
            self.push(V.ConstantVariable(self.current.offset // 2))
        self.push(exc)
        self.kw_names = ()
        self.jump(target)
        return True

    def _unknown(self, inst: dis.Instruction) -> None:
        raise Unsupported(f"bytecode {inst.opname} is not supported")

    def jump(self, target_offset: int) -> None:
        self.ip = self.index_of[target_offset]

    # -- stack --------------------------------------------------------------------

    def push(self, vt: V.VariableTracker) -> None:
        self.stack.append(vt)

    def push_callable(self, fn: V.VariableTracker, null: bool) -> None:
        """Push ``fn``, with the NULL of a call without ``self`` beside it if ``null``."""
        if null and bc.NULL_BELOW_CALLABLE:
            self.push(V.NULL)
        self.push(fn)
        if null and not bc.NULL_BELOW_CALLABLE:
            self.push(V.NULL)

    def pop(self) -> V.VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> list[V.VariableTracker]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    # -- generic operations (also used by builtins) -----------------------------------

    def getattr(self, obj: V.VariableTracker, name: str) -> V.VariableTracker:
        if name == "__class__" and isinstance(obj, (V.ValueVariable, V.ConstantVariable)):
            # a real object's exact type (guarded wherever the object came from)
            return self.output.wrap(obj.python_type(), None)
        return obj.var_getattr(self, name)

    def store_attr(self, obj: V.VariableTracker, name: str, value: V.VariableTracker) -> None:
        if isinstance(obj, (V.UserObjectVariable, V.NNModuleVariable)):
            obj.setattr(self, name, value)
            return
        if isinstance(obj, V.NestedFunctionVariable):
            obj.set_attribute(name, value)
            return
        raise Unsupported(f"setting attribute {name!r} on {obj.describe()}")

    def delete_attr(self, obj: V.VariableTracker, name: str) -> None:
        if not isinstance(obj, V.UserObjectVariable):
            raise Unsupported(f"deleting attribute {name!r} of {obj.describe()}")
        obj.delattr(self, name)

    def call_function(self, fn: V.VariableTracker, args: list, kwargs: dict) -> V.VariableTracker:
        if isinstance(fn, V.ClassVariable) and fn.value is super:
            return self.make_super(args)
        return fn.call(self, args, kwargs)

    def make_super(self, args: list) -> V.VariableTracker:
        if args:
            return V.SuperVariable(args[0].value, args[1])
        cell = self.cells.get("__class__")
        if not isinstance(cell, RealCellVariable) or not self.code.co_argcount:
            raise Unsupported("zero-argument super() outside a method")
        return V.SuperVariable(cell.cell.cell_contents, self.locals[self.code.co_varnames[0]])

    def unpack_iterable(self, vt: V.VariableTracker) -> list[V.VariableTracker]:
        return vt.unpack(self)

    def binary_op(
        self, symbol: str, a: V.VariableTracker, b: V.VariableTracker
    ) -> V.VariableTracker:
        fn = _BINARY.get(symbol) or _COMPARE.get(symbol)
        if fn is None:
            raise CaptureError(f"unknown binary operator {symbol!r}")
        inplace = symbol.endswith("=") and symbol not in _COMPARE
        base = symbol[:-1] if inplace else symbol
        if (
            inplace
            and not isinstance(a, V.TensorVariable)
            and not hasattr(a.python_type(), f"__i{_DUNDER[base]}__")
        ):  # ``n += t`` on an int: no ``int.__iadd__``, so Python runs ``n = n + t``
            return self.binary_op(base, a, b)
        if isinstance(a, V.UserObjectVariable) or isinstance(b, V.UserObjectVariable):
            native = V.builtin_subclasses.binary(self, symbol, _DUNDER[base], a, b)
            if native is not None:
                return native
            return V.dunders.binary(self, _DUNDER[base], inplace, a, b)
        if isinstance(a, V.TensorVariable) or isinstance(b, V.TensorVariable):
            return self.output.call_op("call_function", fn, [a, b], {})
        if a.is_constant() and b.is_constant():
            return fold(fn, a.as_python_constant(), b.as_python_constant())
        result = a.binary(self, symbol, b, False) or b.binary(self, symbol, a, True)
        if result is not None:
            return result
        if symbol in ("==", "!="):
            equal = self.equals(a, b)
            if equal is not None:
                return V.ConstantVariable(equal == (symbol == "=="))
        raise Unsupported(f"operator {symbol} on {a.describe()} and {b.describe()}")

    def equals(self, a: V.VariableTracker, b: V.VariableTracker) -> bool | None:
        """``a == b`` as a bool where capture time can tell: sequences and dicts item by item
        (``item_equals``), objects without an ``__eq__`` of their own by identity; else None."""
        if isinstance(a, V.ContainerVariable) and isinstance(b, V.ContainerVariable):
            if isinstance(a, V.ListVariable) != isinstance(b, V.ListVariable):
                return False  # a list never equals a tuple
            return len(a.items) == len(b.items) and all(map(self.item_equals, a.items, b.items))
        if isinstance(a, V.DictVariable) and isinstance(b, V.DictVariable):
            ordered = isinstance(a, V.OrderedDictVariable) and isinstance(b, V.OrderedDictVariable)
            if ordered and list(a.items) != list(b.items):
                return False  # two OrderedDicts are equal only in the same order
            return len(a.items) == len(b.items) and all(
                k in b.items and self.item_equals(v, b.items[k]) for k, v in a.items.items()
            )
        if _defines_eq(a) or _defines_eq(b):
            return None
        return self.is_same(a, b)

    def item_equals(self, a: V.VariableTracker, b: V.VariableTracker) -> bool:
        """How containers compare items (``PyObject_RichCompareBool``): identity first, then the
        truth of ``a == b`` (for two different tensors that needs their values: a graph break)."""
        return bool(self.is_same(a, b)) or self.truth(self.binary_op("==", a, b))

    def is_same(self, a: V.VariableTracker, b: V.VariableTracker) -> bool | None:
        """``a is b`` when it can be known at capture time, else None."""
        if a is b:
            return True
        if a.is_constant() and b.is_constant():
            return a.as_python_constant() is b.as_python_constant()
        if isinstance(a, V.OpaqueVariable) or isinstance(b, V.OpaqueVariable):
            return None
        if any(isinstance(v, V.UserObjectVariable) and v.value is None for v in (a, b)):
            return False  # an object the frame built has one tracker: ``a is b`` caught it
        if (
            isinstance(a, V.ValueVariable)
            and isinstance(b, V.ValueVariable)
            and a.value is not None
        ):
            same = a.value is b.value
            if a.source and b.source and isinstance(a, (V.UserObjectVariable, V.NNModuleVariable)):
                expr = f"({a.source} is {b.source}) is {same!r}"
                self.output.guards.add(expr, 2, f"{a.source} is{'' if same else ' not'} {b.source}")
            return same
        if (a.is_constant() and a.as_python_constant() is None) or (
            b.is_constant() and b.as_python_constant() is None
        ):
            return False
        if type(a) is not type(b):
            return False
        if isinstance(a, (V.TensorVariable, V.ContainerVariable, V.DictVariable)):
            return False
        return None

    def subscript(self, obj: V.VariableTracker, index: V.VariableTracker) -> V.VariableTracker:
        if isinstance(obj, V.TensorVariable):
            return self.output.call_op("call_function", operator.getitem, [obj, index], {})
        if isinstance(obj, V.NNModuleVariable):
            return self.output.module_getitem(obj, index.as_python_constant())
        if isinstance(obj, V.numpy_arrays.NumpyArrayVariable):
            return obj.getitem(self, index)
        if isinstance(obj, V.DictVariable):
            return obj.getitem(self, V.sets.key_of(index, self))
        if isinstance(obj, (V.ContainerVariable, V.DequeVariable)):
            return obj.getitem(self, index.as_python_constant())
        if isinstance(obj, V.chainmap.ChainMapVariable):
            return obj.getitem(self, index)
        if obj.is_constant() and index.is_constant():
            return fold(operator.getitem, obj.as_python_constant(), index.as_python_constant())
        if isinstance(obj, V.UserObjectVariable):
            return self.call_function(self.getattr(obj, "__getitem__"), [index], {})
        raise Unsupported(f"indexing {obj.describe()} with {index.describe()}")

    def truth(self, vt: V.VariableTracker) -> bool:
        return vt.truth(self)

    # -- inlining -------------------------------------------------------------------

    def inline_call(self, fn: Any, args: list, kwargs: dict) -> V.VariableTracker:
        fn = getattr(fn, "_torchkiln_original", fn)
        code = getattr(fn, "__code__", None)
        if not isinstance(fn, types.FunctionType) or code is None:
            raise Unsupported(f"calling {fn!r}")
        if is_stdlib(fn.__module__):
            raise Unsupported(
                f"calling {fn.__module__}.{fn.__qualname__} (standard library, not traced)"
            )
        defaults, kwdefaults = self._defaults_of(fn)
        guards = self.output.guards
        owner = self._source_of(fn)
        closure = [
            RealCellVariable(
                cell,
                f"{owner}.__closure__[{i}].cell_contents"
                if owner
                else f"{guards.bind_cell(fn, i)}.cell_contents",
            )
            for i, cell in enumerate(fn.__closure__ or ())
        ]
        globals_expr = guards.bind(fn.__globals__, "G")
        return self._inline(
            code, fn.__globals__, globals_expr, args, kwargs, defaults, kwdefaults, closure
        )

    def _source_of(self, fn: types.FunctionType) -> str | None:
        """The source ``fn`` was read through, if any: its cells and defaults are read
        through it, so that the entry does not keep ``fn`` alive (see ``GuardSet.identity``)."""
        known = self.output.by_id.get(id(fn))
        if known is not None and getattr(known, "value", None) is fn:
            return known.source
        return None

    def _defaults_of(self, fn: types.FunctionType) -> tuple[list, dict]:
        """Trackers for ``fn``'s default arguments, each read through ``fn.__defaults__`` /
        ``fn.__kwdefaults__`` and guarded like any source: the function's identity does not
        fix them (users reassign ``__defaults__``)."""
        positional, keyword = fn.__defaults__ or (), fn.__kwdefaults__ or {}
        if not positional and not keyword:
            return [], {}
        guards = self.output.guards
        name = self._source_of(fn) or guards.bind(fn, "fn")
        if positional:  # which parameter each default belongs to depends on how many there are
            guards.length(f"{name}.__defaults__", len(positional))
            guards.read_once(f"{name}.__defaults__")
        if keyword:
            guards.read_once(f"{name}.__kwdefaults__")
        wrap = self.output.wrap
        defaults = [wrap(d, f"{name}.__defaults__[{i}]") for i, d in enumerate(positional)]
        kwdefaults = {k: wrap(v, f"{name}.__kwdefaults__[{k!r}]") for k, v in keyword.items()}
        return defaults, kwdefaults

    def inline_nested(
        self, fn: V.NestedFunctionVariable, args: list, kwargs: dict
    ) -> V.VariableTracker:
        defaults = list(fn.defaults or ())
        kwdefaults = dict(fn.kwdefaults or {})
        return self._inline(
            fn.code,
            fn.globals,
            self._globals_expr_for(fn.globals),
            args,
            kwargs,
            defaults,
            kwdefaults,
            list(fn.closure or ()),
        )

    def _globals_expr_for(self, f_globals: dict) -> str:
        if f_globals is self.f_globals:
            return self.globals_expr
        return self.output.guards.bind(f_globals, "G")

    def _inline(
        self,
        code: types.CodeType,
        f_globals: dict,
        globals_expr: str,
        args: list,
        kwargs: dict,
        defaults: list,
        kwdefaults: dict,
        closure: list,
    ) -> V.VariableTracker:
        is_generator = bool(code.co_flags & inspect.CO_GENERATOR)
        if code.co_flags & _CO_GENERATOR_LIKE and not is_generator:
            raise Unsupported(f"calling coroutine function {code.co_name}")
        if self.depth >= MAX_INLINE_DEPTH:
            raise Unsupported(
                f"call depth above {MAX_INLINE_DEPTH} while inlining {code.co_name} (recursion?)"
            )
        f_locals = bind_arguments(code, args, kwargs, defaults, kwdefaults)
        child = Translator(
            self.output, code, f_globals, globals_expr, f_locals, closure, parent=self
        )
        if is_generator:  # nothing runs before the first ``next``
            child.is_generator = True
            return V.GeneratorVariable(child)
        return child.run()

    # -- opcodes: no-ops and stack manipulation ----------------------------------------

    def NOP(self, inst: dis.Instruction) -> None:
        pass

    RESUME = PRECALL = EXTENDED_ARG = CACHE = COPY_FREE_VARS = NOP

    def PUSH_NULL(self, inst: dis.Instruction) -> None:
        self.push(V.NULL)

    def POP_TOP(self, inst: dis.Instruction) -> None:
        self.pop()

    def END_FOR(self, inst: dis.Instruction) -> None:
        self.popn(bc.END_FOR_POPS)

    def COPY(self, inst: dis.Instruction) -> None:
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst: dis.Instruction) -> None:
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    # -- loads and stores -----------------------------------------------------------

    def LOAD_CONST(self, inst: dis.Instruction) -> None:
        value = inst.argval
        if V.is_constant_value(value):
            self.push(V.ConstantVariable(value))
        else:
            self.push(V.ValueVariable(value))

    def LOAD_FAST(self, inst: dis.Instruction) -> None:
        cell = self.cells.get(inst.argval)
        if cell is not None:  # a cell for a closure: 3.13 spells ``LOAD_CLOSURE`` so
            self.push(cell)
            return
        try:
            self.push(self.locals[inst.argval])
        except KeyError:
            raise Unsupported(
                f"local variable {inst.argval!r} referenced before assignment"
            ) from None

    def LOAD_FAST_AND_CLEAR(self, inst: dis.Instruction) -> None:
        self.push(self.locals.pop(inst.argval, V.NULL))

    def STORE_FAST(self, inst: dis.Instruction) -> None:
        value = self.pop()
        if value is V.NULL:
            self.locals.pop(inst.argval, None)
        else:
            self.locals[inst.argval] = value

    def DELETE_FAST(self, inst: dis.Instruction) -> None:
        del self.locals[inst.argval]

    def _superinstruction(self, inst: dis.Instruction) -> None:
        """3.13's ``LOAD_FAST_LOAD_FAST`` and kin: the two instructions it fuses, in turn."""
        for name, local in zip(bc.SUPERINSTRUCTIONS[inst.opname], inst.argval):
            getattr(self, name)(inst._replace(opname=name, argval=local))

    LOAD_FAST_LOAD_FAST = STORE_FAST_STORE_FAST = STORE_FAST_LOAD_FAST = _superinstruction

    def LOAD_GLOBAL(self, inst: dis.Instruction) -> None:
        self.push_callable(self.load_global(inst.argval), bc.load_global_pushes_null(inst))

    def load_global(self, name: str) -> V.VariableTracker:
        override = self.output.global_overrides.get((id(self.f_globals), name))
        if override is not None:
            return override
        if name in self.f_globals:
            return self.output.wrap(self.f_globals[name], f"{self.globals_expr}[{name!r}]")
        builtins_ns = self.f_globals.get("__builtins__", __builtins__)
        if isinstance(builtins_ns, types.ModuleType):
            builtins_ns = builtins_ns.__dict__
        if name not in builtins_ns:
            raise Unsupported(f"name {name!r} is not defined")
        self.output.guards.add(
            f"{name!r} not in {self.globals_expr}",
            1,
            f"global {name!r} does not shadow the builtin",
        )
        return self.output.wrap(builtins_ns[name], None)

    def STORE_GLOBAL(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.output.global_overrides[(id(self.f_globals), inst.argval)] = value
        self.output.side_effects.store_global(self.globals_expr, inst.argval, value)

    def MAKE_CELL(self, inst: dis.Instruction) -> None:
        self.cells[inst.argval] = V.CellVariable(self.locals.pop(inst.argval, None))

    def LOAD_CLOSURE(self, inst: dis.Instruction) -> None:
        self.push(self.cells[inst.argval])

    def LOAD_DEREF(self, inst: dis.Instruction) -> None:
        cell = self.cells[inst.argval]
        if isinstance(cell, RealCellVariable):
            if cell.override is not None:
                self.push(cell.override)
                return
            try:
                contents = cell.cell.cell_contents
            except ValueError:
                raise Unsupported(
                    f"free variable {inst.argval!r} referenced before assignment"
                ) from None
            self.push(self.output.wrap(contents, cell.source))
            return
        if cell.contents is None:
            raise Unsupported(f"free variable {inst.argval!r} referenced before assignment")
        self.push(cell.contents)

    def STORE_DEREF(self, inst: dis.Instruction) -> None:
        cell = self.cells[inst.argval]
        if isinstance(cell, RealCellVariable):
            cell.override = self.pop()
            self.output.side_effects.store_cell(cell.source, cell.override)
            return
        cell.contents = self.pop()

    def LOAD_ATTR(self, inst: dis.Instruction) -> None:
        obj = self.pop()
        self.push_callable(self.getattr(obj, inst.argval), bc.load_attr_is_method(inst))

    LOAD_METHOD = LOAD_ATTR

    def LOAD_SUPER_ATTR(self, inst: dis.Instruction) -> None:
        obj = self.pop()
        cls = self.pop()
        self.pop()
        attr = V.SuperVariable(cls.value, obj).var_getattr(self, inst.argval)
        self.push_callable(attr, bool(inst.arg & 1))

    def STORE_ATTR(self, inst: dis.Instruction) -> None:
        obj = self.pop()
        value = self.pop()
        self.store_attr(obj, inst.argval, value)

    def DELETE_ATTR(self, inst: dis.Instruction) -> None:
        self.delete_attr(self.pop(), inst.argval)

    def IMPORT_NAME(self, inst: dis.Instruction) -> None:
        """``__import__(name, fromlist=..., level=...)`` of a module already imported: the
        named module itself when names are imported from it, else its top-level package."""
        level, fromlist = (value.as_python_constant() for value in self.popn(2))
        name = self._absolute_module_name(inst.argval, level)
        module = sys.modules.get(name)
        if module is None:
            raise Unsupported(f"importing {name} (not imported yet)")
        if fromlist:
            # a package's missing names may be submodules that __import__ would import
            missing = [n for n in fromlist if n != "*" and not hasattr(module, n)]
            if missing and hasattr(module, "__path__"):
                raise Unsupported(f"from {name} import {', '.join(missing)} (not imported yet)")
            imported = module
        else:
            imported = sys.modules[name.partition(".")[0]]
        # a source, so that what is read from the module is guarded like a global
        self.push(V.PythonModuleVariable(imported, self.output.guards.bind(imported, "mod")))

    def _absolute_module_name(self, name: str, level: int) -> str:
        """``name`` imported ``level`` packages up from the frame's own package."""
        if level == 0:
            return name
        package = self.f_globals.get("__package__")
        if not package:
            raise Unsupported(f"relative import of {name!r} outside a known package")
        try:
            return importlib.util.resolve_name("." * level + name, package)
        except ImportError as e:
            raise Unsupported(f"relative import of {name!r}: {e}") from None

    def IMPORT_FROM(self, inst: dis.Instruction) -> None:
        self.push(self.getattr(self.stack[-1], inst.argval))

    # -- operators ------------------------------------------------------------------

    def BINARY_OP(self, inst: dis.Instruction) -> None:
        b = self.pop()
        a = self.pop()
        self.push(self.binary_op(bc.BINARY_OPS[inst.arg], a, b))

    def COMPARE_OP(self, inst: dis.Instruction) -> None:
        b = self.pop()
        a = self.pop()
        result = self.binary_op(inst.argval, a, b)
        self.push(self.to_bool(result) if bc.compare_to_bool(inst) else result)

    def to_bool(self, value: V.VariableTracker) -> V.VariableTracker:
        """``bool(value)``; a tensor stays as it is, for the jump that consumes it to break on."""
        if isinstance(value, V.TensorVariable):
            return value
        return V.ConstantVariable(self.truth(value))

    def TO_BOOL(self, inst: dis.Instruction) -> None:
        self.push(self.to_bool(self.pop()))

    def _unary(self, fn: Any) -> None:
        value = self.pop()
        symbolic_number = isinstance(value, V.SymNodeVariable) and fn is not operator.invert
        if isinstance(value, V.TensorVariable) or symbolic_number:  # ``-n`` stays symbolic
            self.push(self.output.call_op("call_function", fn, [value], {}))
        elif value.is_constant():
            self.push(fold(fn, value.as_python_constant()))
        elif isinstance(value, V.UserObjectVariable):
            self.push(V.dunders.unary(self, value, f"__{fn.__name__}__"))
        else:
            raise Unsupported(f"{fn.__name__} of {value.describe()}")

    def UNARY_NEGATIVE(self, inst: dis.Instruction) -> None:
        self._unary(operator.neg)

    def UNARY_POSITIVE(self, inst: dis.Instruction) -> None:
        self._unary(operator.pos)

    def UNARY_INVERT(self, inst: dis.Instruction) -> None:
        self._unary(operator.invert)

    def UNARY_NOT(self, inst: dis.Instruction) -> None:
        self.push(V.ConstantVariable(not self.truth(self.pop())))

    def CALL_INTRINSIC_1(self, inst: dis.Instruction) -> None:
        name = bc.intrinsic_name(inst)
        if name == "INTRINSIC_UNARY_POSITIVE":
            self._unary(operator.pos)
        elif name == "INTRINSIC_LIST_TO_TUPLE":
            self.push(V.TupleVariable(self.pop().items))
        elif name == "INTRINSIC_STOPITERATION_ERROR":  # 3.12+: a generator's StopIteration
            self.push(exceptions.stop_iteration_error(self.pop()))
        else:
            raise Unsupported(f"{name}")

    def LIST_TO_TUPLE(self, inst: dis.Instruction) -> None:
        self.push(V.TupleVariable(self.pop().items))

    def IS_OP(self, inst: dis.Instruction) -> None:
        b = self.pop()
        a = self.pop()
        same = self.is_same(a, b)
        if same is None:
            raise Unsupported(f"'is' between {a.describe()} and {b.describe()}")
        self.push(V.ConstantVariable(same != bool(inst.arg)))

    def CONTAINS_OP(self, inst: dis.Instruction) -> None:
        container = self.pop()
        item = self.pop()
        if isinstance(container, V.DictViewVariable) and container.kind == "keys":
            container = container.mapping
        if isinstance(container, V.DictVariable):
            found = V.sets.key_of(item, self) in container.items
        elif isinstance(container, (V.SetVariable, V.chainmap.ChainMapVariable)):
            found = container.contains(self, item)
        elif isinstance(container, V.NNModuleVariable) and isinstance(
            container.value, torch.nn.ModuleDict
        ):
            self.output.guard_module_keys(container)
            found = item.as_python_constant() in container.value._modules
        elif isinstance(container, V.TensorVariable):
            raise Unsupported("'in' on a tensor compares values (data-dependent)")
        elif _is_native_container(container) and V.literal_repr(item) is not None:
            # a user mapping with C-level or mixin __contains__ (a dict subclass, a registry):
            # a lookup (``LookupVariable``) whose guard re-runs it, so a changed mapping recompiles
            contains = self.getattr(container, "__contains__")
            found = self.call_function(contains, [item], {}).as_python_constant()
        elif container.is_constant() and item.is_constant():  # ``"10" in "10 bar"``
            value, member = container.as_python_constant(), item.as_python_constant()
            found = fold(operator.contains, value, member).as_python_constant()
        else:
            found = self.contains(container, item)
        self.push(V.ConstantVariable(found != bool(inst.arg)))

    def contains(self, container: V.VariableTracker, item: V.VariableTracker) -> bool:
        """``item in container`` for sequences and iterators: iterates until an item equals
        ``item`` (``item_equals``: ``x in [x]`` is True by identity); a user object's own
        ``__contains__`` first."""
        if isinstance(container, V.UserObjectVariable) and (
            container.defines("__contains__")
            or isinstance(container, V.builtin_subclasses.BuiltinSubclassVariable)
        ):
            return self.truth(
                self.call_function(self.getattr(container, "__contains__"), [item], {})
            )
        iterator = container.make_iterator(self)
        while (value := iterator.next(self)) is not None:
            if self.item_equals(value, item):
                return True
        return False

    # -- subscripts ------------------------------------------------------------------

    def BINARY_SUBSCR(self, inst: dis.Instruction) -> None:
        index = self.pop()
        obj = self.pop()
        self.push(self.subscript(obj, index))

    def BINARY_SLICE(self, inst: dis.Instruction) -> None:
        end = self.pop()
        start = self.pop()
        obj = self.pop()
        self.push(self.subscript(obj, self._slice([start, end])))

    def _slice(self, parts: list[V.VariableTracker]) -> V.VariableTracker:
        if all(p.is_constant() for p in parts):
            return V.ConstantVariable(slice(*(p.as_python_constant() for p in parts)))
        return V.SliceVariable(parts)

    def STORE_SUBSCR(self, inst: dis.Instruction) -> None:
        key = self.pop()
        obj = self.pop()
        value = self.pop()
        self._setitem(obj, key, value)

    def STORE_SLICE(self, inst: dis.Instruction) -> None:
        end = self.pop()
        start = self.pop()
        obj = self.pop()
        value = self.pop()
        self._setitem(obj, self._slice([start, end]), value)

    def _setitem(
        self, obj: V.VariableTracker, key: V.VariableTracker, value: V.VariableTracker
    ) -> None:
        if isinstance(obj, V.TensorVariable):
            self.output.tensor_method(obj, "__setitem__", [key, value], {})
        elif isinstance(obj, V.DictVariable):
            obj.call_method(self, "__setitem__", [key, value], {})
        elif isinstance(obj, V.ListVariable):
            index = key.as_python_constant()
            self.output.side_effects.mutate(obj)
            if isinstance(index, slice):
                obj.items[index] = self.unpack_iterable(value)
            else:
                obj.items[index] = value
        elif isinstance(obj, (V.UserObjectVariable, V.DequeVariable, V.chainmap.ChainMapVariable)):
            self.call_function(self.getattr(obj, "__setitem__"), [key, value], {})
        elif isinstance(obj, V.numpy_arrays.NumpyArrayVariable):
            obj.call_method(self, "__setitem__", [key, value], {})
        else:
            raise Unsupported(f"item assignment on {obj.describe()}")

    def DELETE_SUBSCR(self, inst: dis.Instruction) -> None:
        key = self.pop()
        obj = self.pop()
        if isinstance(obj, V.DictVariable):
            obj.call_method(self, "__delitem__", [key], {})
        elif isinstance(obj, V.ListVariable):
            self.output.side_effects.mutate(obj)
            del obj.items[key.as_python_constant()]
        elif isinstance(
            obj, (V.builtin_subclasses.BuiltinSubclassVariable, V.chainmap.ChainMapVariable)
        ):
            self.call_function(self.getattr(obj, "__delitem__"), [key], {})
        else:
            raise Unsupported(f"del on an item of {obj.describe()}")

    # -- building containers ---------------------------------------------------------

    def BUILD_TUPLE(self, inst: dis.Instruction) -> None:
        self.push(V.TupleVariable(self.popn(inst.arg)))

    def BUILD_LIST(self, inst: dis.Instruction) -> None:
        self.push(V.ListVariable(self.popn(inst.arg)))

    def BUILD_SET(self, inst: dis.Instruction) -> None:
        self.push(V.sets.build_set(self, self.popn(inst.arg)))

    def BUILD_MAP(self, inst: dis.Instruction) -> None:
        flat = self.popn(2 * inst.arg)
        self.push(
            V.DictVariable(
                {V.sets.key_of(flat[i], self): flat[i + 1] for i in range(0, len(flat), 2)}
            )
        )

    def BUILD_CONST_KEY_MAP(self, inst: dis.Instruction) -> None:
        keys = self.pop().as_python_constant()
        values = self.popn(inst.arg)
        self.push(V.DictVariable(dict(zip(keys, values))))

    def BUILD_SLICE(self, inst: dis.Instruction) -> None:
        self.push(self._slice(self.popn(inst.arg)))

    def BUILD_STRING(self, inst: dis.Instruction) -> None:
        parts = self.popn(inst.arg)
        self.push(V.ConstantVariable("".join(p.as_python_constant() for p in parts)))

    def FORMAT_VALUE(self, inst: dis.Instruction) -> None:
        flags = inst.arg
        spec = self.pop().as_python_constant() if flags & 0x04 else ""
        self.push(self._format(self.pop(), flags & 0x03, spec))

    def _format(self, value: V.VariableTracker, conversion: int, spec: str) -> V.VariableTracker:
        """``format(str|repr|ascii(value), spec)`` (``conversion`` 1, 2, 3; 0 for none)."""
        if isinstance(value, V.TensorVariable):
            raise Unsupported("formatting a tensor into a string needs its value")
        if isinstance(value, V.dunders.RuntimeReprVariable) and not (conversion or spec):
            return value  # 3.13's FORMAT_SIMPLE after CONVERT_VALUE: the text as it is
        if isinstance(value, V.UserObjectVariable) and not isinstance(value, V.ExceptionVariable):
            if conversion in (1, 2):
                value = V.dunders.text(self, value, ("__str__", "__repr__")[conversion - 1])
                if not spec:  # ``format(text, "")`` is the text (one built at run time too)
                    return value
                conversion = 0
            elif conversion == 0:
                return V.dunders.format_of(self, value, spec)
        real = value.as_python_constant()
        if conversion:
            real = (str, repr, ascii)[conversion - 1](real)
        return V.ConstantVariable(format(real, spec))

    def CONVERT_VALUE(self, inst: dis.Instruction) -> None:
        self.push(self._format(self.pop(), inst.arg, ""))

    def FORMAT_SIMPLE(self, inst: dis.Instruction) -> None:
        self.push(self._format(self.pop(), 0, ""))

    def FORMAT_WITH_SPEC(self, inst: dis.Instruction) -> None:
        spec = self.pop().as_python_constant()
        self.push(self._format(self.pop(), 0, spec))

    def LIST_APPEND(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.stack[-inst.arg].items.append(value)

    def SET_ADD(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.stack[-inst.arg].call_method(self, "add", [value], {})

    def MAP_ADD(self, inst: dis.Instruction) -> None:
        value = self.pop()
        key = self.pop()
        self.stack[-inst.arg].items[V.sets.key_of(key, self)] = value

    def LIST_EXTEND(self, inst: dis.Instruction) -> None:
        seq = self.pop()
        self.stack[-inst.arg].items.extend(self.unpack_iterable(seq))

    def SET_UPDATE(self, inst: dis.Instruction) -> None:
        seq = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [seq], {})

    def DICT_UPDATE(self, inst: dis.Instruction) -> None:
        other = self.pop()
        if not isinstance(other, (V.DictVariable, V.UserObjectVariable)):
            raise Unsupported(f"** of {other.describe()}")
        self.stack[-inst.arg].items.update(V.merged_items(self, other))

    DICT_MERGE = DICT_UPDATE

    def UNPACK_SEQUENCE(self, inst: dis.Instruction) -> None:
        items = self.unpack_iterable(self.pop())
        if len(items) != inst.arg:
            raise Unsupported(f"unpacking {len(items)} values into {inst.arg} names")
        for item in reversed(items):
            self.push(item)

    def UNPACK_EX(self, inst: dis.Instruction) -> None:
        before, after = inst.arg & 0xFF, inst.arg >> 8
        items = self.unpack_iterable(self.pop())
        if len(items) < before + after:
            raise Unsupported("not enough values to unpack")
        middle = V.ListVariable(items[before : len(items) - after])
        for item in reversed([*items[:before], middle, *items[len(items) - after :]]):
            self.push(item)

    # -- control flow ----------------------------------------------------------------

    def JUMP_FORWARD(self, inst: dis.Instruction) -> None:
        self.jump(inst.argval)

    JUMP_BACKWARD = JUMP = JUMP_FORWARD

    def _branch(self, inst: dis.Instruction, jump_if: bool) -> None:
        value = self.pop()
        if isinstance(value, V.TensorVariable):
            raise Unsupported("data-dependent branch on a tensor value (if tensor: ...)")
        if self.truth(value) == jump_if:
            self.jump(inst.argval)

    def POP_JUMP_IF_TRUE(self, inst: dis.Instruction) -> None:
        self._branch(inst, True)

    def POP_JUMP_IF_FALSE(self, inst: dis.Instruction) -> None:
        self._branch(inst, False)

    def POP_JUMP_IF_NONE(self, inst: dis.Instruction) -> None:
        value = self.pop()
        if value.is_constant() and value.as_python_constant() is None:
            self.jump(inst.argval)

    def POP_JUMP_IF_NOT_NONE(self, inst: dis.Instruction) -> None:
        value = self.pop()
        if not (value.is_constant() and value.as_python_constant() is None):
            self.jump(inst.argval)

    def JUMP_IF_TRUE_OR_POP(self, inst: dis.Instruction) -> None:
        if self.truth(self.stack[-1]):
            self.jump(inst.argval)
        else:
            self.pop()

    def JUMP_IF_FALSE_OR_POP(self, inst: dis.Instruction) -> None:
        if not self.truth(self.stack[-1]):
            self.jump(inst.argval)
        else:
            self.pop()

    def GET_ITER(self, inst: dis.Instruction) -> None:
        self.push(self.pop().make_iterator(self))

    def FOR_ITER(self, inst: dis.Instruction) -> None:
        iterator = self.stack[-1]
        if not isinstance(iterator, V.IteratorVariable):
            raise Unsupported(f"for loop over {iterator.describe()}")
        value = iterator.next(self)
        if value is not None:
            self.push(value)
            return
        self.pop()
        self.jump(inst.argval)
        self.ip += bc.for_iter_exit_skip()

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.return_value = self.pop()

    def RETURN_CONST(self, inst: dis.Instruction) -> None:
        self.return_value = V.ConstantVariable(inst.argval)

    # -- exceptions ------------------------------------------------------------------

    def LOAD_ASSERTION_ERROR(self, inst: dis.Instruction) -> None:
        self.push(self.output.wrap(AssertionError, None))

    def RAISE_VARARGS(self, inst: dis.Instruction) -> None:
        if inst.arg == 0:  # bare ``raise``: the exception being handled, unchained
            if self.handling is None:
                raise exceptions.error(
                    RuntimeError, "No active exception to reraise", reason="bare raise"
                )
            raise Raised(self.handling, f"re-raising {self.handling.describe()}", chained=True)
        cause = self.pop() if inst.arg == 2 else None
        exc = exceptions.instance(self, self.pop())
        if cause is not None:
            none = cause.is_constant() and cause.as_python_constant() is None
            exc.set_cause(cause if none else exceptions.instance(self, cause))
        raise Raised(exc, f"raising {exc.describe()}")

    def PUSH_EXC_INFO(self, inst: dis.Instruction) -> None:
        exc = self.pop()
        self.push(self.handling or V.ConstantVariable(None))
        self.handling = exc
        self.push(exc)

    def POP_EXCEPT(self, inst: dis.Instruction) -> None:
        previous = self.pop()
        self.handling = None if previous.is_constant() else previous

    def CHECK_EXC_MATCH(self, inst: dis.Instruction) -> None:
        classes = self.pop().as_python_constant()
        self.push(V.ConstantVariable(issubclass(self.stack[-1].python_type(), classes)))

    def RERAISE(self, inst: dis.Instruction) -> None:
        exc = self.pop()
        raise Raised(exc, f"{exc.describe()} not caught in the frame", chained=True)

    def WITH_EXCEPT_START(self, inst: dis.Instruction) -> None:
        """``__exit__(type, exc, None)`` of the ``with`` block an exception left (stack:
        ``__exit__``, ``lasti``, the previous exception, the exception)."""
        exc = self.stack[-1]
        exit_fn = self.stack[-4]
        exc_type = self.output.wrap(exc.python_type(), None)
        self.push(self.call_function(exit_fn, [exc_type, exc, V.ConstantVariable(None)], {}))

    def RETURN_GENERATOR(self, inst: dis.Instruction) -> None:
        if not self.is_generator:
            raise Unsupported("generator function")
        self.push(V.ConstantVariable(None))

    def YIELD_VALUE(self, inst: dis.Instruction) -> None:
        """Suspends the generator (``resume_generator``) with the value it yields."""
        self.yields += 1
        if not self.is_generator or self.yields > MAX_GENERATOR_ITEMS:
            raise Unsupported(
                f"yield outside a generator the frame called (or more than {MAX_GENERATOR_ITEMS})"
            )
        self.suspended = self.pop()  # ``resume_generator`` pushes what is sent in

    def GET_YIELD_FROM_ITER(self, inst: dis.Instruction) -> None:
        self.push(self.pop().make_iterator(self))

    def SEND(self, inst: dis.Instruction) -> None:
        """``yield from``'s step: send the value on to the delegate; once it returned, its
        return value replaces it (3.11) or goes above it for ``END_SEND`` (3.12+)."""
        value = self.pop()
        delegate = self.stack[-1]
        item = delegate.send(self, value)
        if item is not None:
            self.push(item)
            return
        result = delegate.return_value() if isinstance(delegate, V.GeneratorVariable) else None
        result = result or V.ConstantVariable(None)
        if bc.SEND_KEEPS_RECEIVER:
            self.push(result)
        else:
            self.stack[-1] = result
        self.jump(inst.argval)

    def END_SEND(self, inst: dis.Instruction) -> None:
        value = self.pop()
        self.pop()
        self.push(value)

    # -- calls -----------------------------------------------------------------------

    def KW_NAMES(self, inst: dis.Instruction) -> None:
        self.kw_names = bc.kw_names(inst, self.code.co_consts)

    def CALL(self, inst: dis.Instruction) -> None:
        args = self.popn(inst.arg)
        b = self.pop()
        a = self.pop()
        if a is V.NULL:  # NULL, callable (3.11, 3.12)
            fn = b
        elif b is V.NULL:  # callable, NULL (3.13)
            fn = a
        else:  # a method and its self
            fn, args = a, [b, *args]
        kwargs = {}
        if self.kw_names:
            n = len(self.kw_names)
            kwargs = dict(zip(self.kw_names, args[-n:]))
            args = args[:-n]
            self.kw_names = ()
        self.push(self.call_function(fn, args, kwargs))

    def CALL_KW(self, inst: dis.Instruction) -> None:
        """3.13: the keyword names are on the stack, above the arguments."""
        self.kw_names = self.pop().as_python_constant()
        self.CALL(inst)

    def CALL_FUNCTION_EX(self, inst: dis.Instruction) -> None:
        kwargs_vt = self.pop() if inst.arg & 1 else None
        args_vt = self.pop()
        fn = self.pop()
        if fn is V.NULL:  # callable, NULL (3.13)
            fn = self.pop()
        elif self.stack and self.stack[-1] is V.NULL:  # NULL, callable (3.11, 3.12)
            self.pop()
        args = self.unpack_iterable(args_vt)
        kwargs = {}
        if kwargs_vt is not None:
            if not isinstance(kwargs_vt, (V.DictVariable, V.UserObjectVariable)):
                raise Unsupported(f"** of {kwargs_vt.describe()}")
            kwargs = V.merged_items(self, kwargs_vt)
        self.push(self.call_function(fn, args, kwargs))

    def MAKE_FUNCTION(self, inst: dis.Instruction) -> None:
        fn = V.NestedFunctionVariable(self.pop().value, None, None, None, self.f_globals)
        for flag in bc.make_function_flags(inst):
            self._set_function_attribute(fn, flag, self.pop())
        self.push(fn)

    def SET_FUNCTION_ATTRIBUTE(self, inst: dis.Instruction) -> None:
        fn = self.pop()
        self._set_function_attribute(fn, inst.arg, self.pop())
        self.push(fn)

    def _set_function_attribute(
        self, fn: V.NestedFunctionVariable, flag: int, value: V.VariableTracker
    ) -> None:
        """One of ``MAKE_FUNCTION``'s flags: 8 closure, 4 annotations (only noted), 2 keyword
        defaults, 1 defaults."""
        if flag == 0x08:
            fn.closure = tuple(self.unpack_iterable(value))
        elif flag == 0x04:
            fn.annotated = True
        elif flag == 0x02:
            fn.kwdefaults = dict(value.items)
        elif flag == 0x01:  # a constant tuple when every default is a constant
            fn.defaults = tuple(self.unpack_iterable(value))

    def BEFORE_WITH(self, inst: dis.Instruction) -> None:
        exit_fn, value = self.pop().enter(self)
        self.push(exit_fn)
        self.push(value)


_DUNDER = {
    "+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod",
    "**": "pow", "@": "matmul", "&": "and", "|": "or", "^": "xor", "<<": "lshift", ">>": "rshift",
    "<": "lt", "<=": "le", "==": "eq", "!=": "ne", ">": "gt", ">=": "ge",
}  # fmt: skip


def bind_arguments(
    code: types.CodeType,
    args: list,
    kwargs: dict,
    defaults: list,
    kwdefaults: dict,
) -> dict[str, V.VariableTracker]:
    """Python's argument binding, on trackers: positional, defaults, keyword-only, ``*args``, ``**kwargs``."""
    nargs = code.co_argcount
    nkwonly = code.co_kwonlyargcount
    names = code.co_varnames
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)
    bound: dict[str, V.VariableTracker] = {}
    positional = names[:nargs]
    for name, value in zip(positional, args):
        bound[name] = value
    extra = args[nargs:]
    if extra and not has_varargs:
        raise Unsupported(
            f"{code.co_name}() takes {nargs} positional arguments but {len(args)} were given"
        )
    kwonly = names[nargs : nargs + nkwonly]
    rest: dict[str, V.VariableTracker] = {}
    for key, value in kwargs.items():
        if key in positional[code.co_posonlyargcount :] or key in kwonly:
            if key in bound:
                raise Unsupported(f"{code.co_name}() got multiple values for argument {key!r}")
            bound[key] = value
        elif has_varkw:
            rest[key] = value
        else:
            raise Unsupported(f"{code.co_name}() got an unexpected keyword argument {key!r}")
    first_default = nargs - len(defaults)
    for i, name in enumerate(positional):
        if name not in bound:
            if i < first_default:
                raise Unsupported(f"{code.co_name}() missing required argument {name!r}")
            bound[name] = defaults[i - first_default]
    for name in kwonly:
        if name not in bound:
            if name not in kwdefaults:
                raise Unsupported(f"{code.co_name}() missing keyword-only argument {name!r}")
            bound[name] = kwdefaults[name]
    index = nargs + nkwonly
    if has_varargs:
        bound[names[index]] = V.TupleVariable(list(extra))
        index += 1
    if has_varkw:
        bound[names[index]] = V.DictVariable(rest)
    return bound


def _defines_eq(vt: V.VariableTracker) -> bool:
    """A user object whose class has its own ``__eq__`` (so ``==`` is not ``is``)."""
    return isinstance(vt, V.UserObjectVariable) and V.class_lookup(vt.cls, "__eq__") not in (
        V.MISSING,
        object.__eq__,
    )


def _is_native_container(vt: V.VariableTracker) -> bool:
    """A real object read through a source whose ``in`` runs C code or the standard
    ``collections.abc`` mixin (``Mapping.__contains__``), not code of the user's to inline."""
    if not isinstance(vt, V.UserObjectVariable) or vt.value is None or vt.source is None:
        return False
    contains = getattr(type(vt.value), "__contains__", None)
    if isinstance(contains, types.FunctionType):
        return contains.__module__ in ("collections.abc", "_collections_abc")
    return contains is not None
