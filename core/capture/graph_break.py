"""Graph breaks: compiled prefix, eager middle, resume function for the rest.

When the translator hits ``Unsupported`` at root instruction ``k`` (also
when the failure is deep inside a call inlined at ``k``), the frame is
translated again and stopped just before ``k``. The entry's transformed
function then:

1. calls the graph captured so far and replays the side effects made
   before ``k`` (in program order);
2. rebuilds the live stack and the bound locals;
3. runs ``k`` natively: a call (a plain Python callee goes through its own
   dispatch wrapper, so its inside is compiled too), an operator, f-string
   formatting, attribute or item store (``_native_step``), or a
   data-dependent jump on a tensor (``if tensor:``), choosing the resume
   function of the branch taken;
4. calls the resume function (``resume.py``) through the dispatcher: it is
   captured and cached under its own code object, like any frame.

If the native call raises inside a ``try`` or ``with`` block, the
exception is handed to the frame's own handler: a resume function that
starts at the handler runs it natively (``finally`` bodies, ``__exit__``).
Any other instruction resumes *at* ``k`` in a resume function that runs
uncompiled: the prefix is still compiled and the result is still right.
"""

from __future__ import annotations

import functools
import inspect
import operator
import types
import weakref
from typing import Any

import torch

from torchkiln.capture import bytecode_compat as bc
from torchkiln.capture import variables as V
from torchkiln.capture.codegen import FrameCodegen
from torchkiln.capture.fakes import FakePropagation
from torchkiln.capture.frame_capture import CacheEntry, compile_graph_of, finish_entry, translate
from torchkiln.capture.resume import ITER, NULL, VALUE, handler_at, resume_code
from torchkiln.capture.signature import params_text
from torchkiln.capture.targets import is_stdlib
from torchkiln.compiled_module import call_override, call_with_hooks, has_call_hooks
from torchkiln.exc import Unsupported

_CALLS = ("CALL", "CALL_KW", "CALL_FUNCTION_EX")
_JUMPS = ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE")


class ResumeCall:
    """Calls a resume function with the parent frame's globals and closure, through dispatch.

    ``layout`` is ``resume_code``'s arguments after the parent's code: (offset, stack kinds,
    local names, cell names). They rebuild the same resume code in another process (``persist``).
    """

    def __init__(self, parent: types.CodeType, layout: tuple, cfg: Any, compiled: bool):
        # imported here, once: the cache module imports this one (an import per call costs ~1 µs)
        from torchkiln.capture.dispatch import frame_cache, run_frame

        self.layout = layout
        self.code = resume_code(parent, *layout)
        self.cfg = cfg
        self.compiled = compiled
        self.cache = frame_cache(self.code)
        self.run_frame = run_frame
        self._last: tuple | None = None

    def __call__(self, parent: types.FunctionType, *args: Any) -> Any:
        last = self._last
        if last is not None and last[0]() is parent:
            fn = last[1]
        else:
            fn = types.FunctionType(
                self.code, parent.__globals__, self.code.co_name, None, parent.__closure__
            )
            self._last = (weakref.ref(parent, self._forget), fn)
        if not self.compiled:
            return fn(*args)
        return self.run_frame(fn, self.cfg, self.cache, args)

    def _forget(self, parent: weakref.ref) -> None:
        """The parent function died: drop the resume function holding its closure."""
        last = self._last
        if last is not None and last[0] is parent:
            self._last = None


class CallThroughDispatch:
    """Runs the call a graph broke at; Python callees go through their own dispatch wrapper."""

    def __init__(self, cfg: Any):
        # imported here, once: the cache module imports this one
        from torchkiln.capture.dispatch import dispatcher

        self.cfg = cfg
        self.dispatcher = dispatcher
        self.wrappers: dict[types.CodeType, Any] = {}

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        target, bound = fn, ()
        if isinstance(fn, torch.nn.Module):
            # What calling the module runs, read from its class without running descriptors
            # (a TorchScript module's ``forward`` is one, and runs natively). Tested before
            # ``hasattr`` below, which on a module runs ``nn.Module.__getattr__`` and raises.
            override = call_override(fn)
            if override is not None:
                target, bound = override, (fn,)
            else:
                return self._call_module(fn, args, kwargs)
        elif hasattr(fn, "_torchkiln_original"):  # compiled already: it dispatches itself
            return fn(*args, **kwargs)
        elif isinstance(fn, types.MethodType):
            if fn.__func__ is torch.nn.Module.__call__:  # ``super().__call__(...)`` of a module
                return self._call_module(fn.__self__, args, kwargs)
            target, bound = fn.__func__, (fn.__self__,)
        dispatch = self._dispatch(target)
        if dispatch is None:
            return fn(*args, **kwargs)
        return dispatch(target, *bound, *args, **kwargs)

    def _call_module(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        """``nn.Module.__call__`` of ``module``: its hooks run as they are (the graph may have
        broken on one: FSDP2's are ``torch._dynamo.disable``-d), its ``forward`` through
        dispatch, so a module with hooks still runs compiled."""
        forward = inspect.getattr_static(type(module), "forward", None)
        dispatch = None if "forward" in module.__dict__ else self._dispatch(forward)
        if dispatch is None:
            return torch.nn.Module.__call__(module, *args, **kwargs)
        compiled = functools.partial(dispatch, forward, module)
        if has_call_hooks(module):
            return call_with_hooks(module, compiled, args, kwargs)
        return compiled(*args, **kwargs)

    def _dispatch(self, target: Any) -> Any:
        """The dispatch wrapper of a user function (None for others: they run as they are)."""
        module = getattr(target, "__module__", None) or ""
        if (
            not isinstance(target, types.FunctionType)
            or module.startswith("torch")
            or is_stdlib(module)
        ):
            return None
        dispatch = self.wrappers.get(target.__code__)
        if dispatch is None:  # one per code, holding no function (closures die as in eager)
            dispatch = self.wrappers[target.__code__] = self.dispatcher(target.__code__, self.cfg)
        return dispatch


def capture_with_break(
    fn: types.FunctionType,
    args: tuple,
    cfg: Any,
    steps: int,
    error: Unsupported,
    replay: FakePropagation | None = None,
) -> CacheEntry | None:
    """Translate again up to root step ``steps`` and break the graph there; None if that fails.

    ``replay`` is the first translation's fake propagation, whose results the second reuses.
    """
    try:
        trace = translate(fn, args, break_step=steps, replay=replay)
        if trace.return_value is not None:
            return None
        return _break_entry(fn, trace, cfg, error)
    except Unsupported:
        return None


def _break_entry(fn: types.FunctionType, trace: Any, cfg: Any, error: Unsupported) -> CacheEntry:
    code = fn.__code__
    tx = trace.translator
    if tx.handling is not None:  # a resumed ``raise`` or ``with`` exit needs ``sys.exc_info()``
        raise Unsupported("graph break inside an except block (the exception is not live in eager)")
    inst = tx.instructions[tx.ip]
    op = bc.opname(inst)
    codegen = FrameCodegen(trace.output, trace.guards, rebuilds_functions=False)
    kinds, slots = [], []
    for vt in tx.stack:
        if vt is V.NULL:
            kinds.append(NULL)
            slots.append(None)
        elif isinstance(vt, V.IteratorVariable):
            kinds.append(ITER)
            slots.append(
                codegen.temp(f"[{', '.join(codegen.reconstruct(i) for i in vt.remaining())}]")
            )
        else:
            kinds.append(VALUE)
            slots.append(codegen.temp(codegen.reconstruct(vt)))
    local_names = tuple(
        n for n in code.co_varnames if n in tx.locals and not n.startswith(("___stack", "___cell_"))
    )
    local_values = [codegen.temp(codegen.reconstruct(tx.locals[name])) for name in local_names]
    cell_names = tuple(
        n
        for n in code.co_cellvars
        if isinstance(tx.cells.get(n), V.CellVariable) and tx.cells[n].contents is not None
    )
    cell_values = [codegen.temp(codegen.reconstruct(tx.cells[n].contents)) for n in cell_names]
    codegen.side_effects()
    tail = codegen.grad_mode_statements()
    next_offset = tx.instructions[tx.ip + 1].offset if tx.ip + 1 < len(tx.instructions) else None
    handler = handler_at(code, inst.offset)

    def resume_call(offset: int, stack_kinds: list[str], values: list[str], compiled: bool) -> str:
        layout = (offset, tuple(stack_kinds), local_names, cell_names)
        resume = ResumeCall(code, layout, cfg, compiled)
        name = codegen.bind(resume, "resume")
        passed = [v for v, k in zip(values, stack_kinds) if k != NULL]
        return f"return {name}(___fn, {', '.join([*local_values, *passed, *cell_values])})"

    step = _native_step(tx, inst, slots, codegen, CallThroughDispatch(cfg))
    if step is not None and next_offset is not None:
        below, statement, pushes = step
        if handler is None:
            tail.append(statement)
        else:  # the exception goes to the frame's own handler, run natively
            depth = handler.depth
            pushed = [str(inst.offset // 2)] if handler.lasti else []
            tail += ["try:", f"    {statement}", "except BaseException as ___e:"]
            tail.append(
                "    "
                + resume_call(
                    handler.target.origin,
                    [*kinds[:depth], *[VALUE] * (len(pushed) + 1)],
                    [*slots[:depth], *pushed, "___e"],
                    False,
                )
            )
        result = ["___r"] if pushes else []
        tail.append(
            resume_call(
                next_offset,
                [*kinds[:below], *[VALUE] * len(result)],
                [*slots[:below], *result],
                True,
            )
        )
    elif op in _JUMPS and isinstance(tx.stack[-1], V.TensorVariable) and next_offset is not None:
        jump_when_true = op == "POP_JUMP_IF_TRUE"
        tail.append(f"if {'' if jump_when_true else 'not '}{slots[-1]}:")
        tail.append("    " + resume_call(inst.argval, kinds[:-1], slots[:-1], True))
        tail.append(resume_call(next_offset, kinds[:-1], slots[:-1], True))
    else:
        tail.append(resume_call(inst.offset, kinds, slots, False))
    graph_args, graphs = compile_graph_of(trace, codegen, cfg.compile_graph)
    source = codegen.function_source(params_text(code), graph_args, tail)
    return finish_entry(
        fn, trace, codegen, source, graphs=graphs, graph_args=graph_args, break_reasons=[error]
    )


_UNARY = {"UNARY_NEGATIVE": "-", "UNARY_INVERT": "~", "UNARY_NOT": "not "}


def _native_step(
    tx: Any, inst: Any, slots: list, codegen: FrameCodegen, call_through: CallThroughDispatch
) -> tuple[int, str, bool] | None:
    """How to run the breaking instruction natively: (stack slots left below it, a statement
    that sets ``___r`` or has the instruction's effect, whether it pushes ``___r``); None if unknown.
    """
    op = bc.opname(inst)
    n = len(slots)
    if op in _CALLS:
        below, call = _native_call(tx, inst, slots, codegen.bind(call_through, "call"))
        return below, f"___r = {call}", True
    if op == "FORMAT_VALUE":
        has_spec = bool(inst.arg & 0x04)
        conversion = ("", "str", "repr", "ascii")[inst.arg & 0x03]
        value = slots[n - 1 - has_spec]
        value = f"{conversion}({value})" if conversion else value
        return (
            n - 1 - has_spec,
            f"___r = format({value}, {slots[n - 1] if has_spec else repr('')})",
            True,
        )
    if op == "CONVERT_VALUE":  # 3.13 splits FORMAT_VALUE into this and the two below
        return n - 1, f"___r = {('str', 'repr', 'ascii')[inst.arg - 1]}({slots[-1]})", True
    if op == "FORMAT_SIMPLE":
        return n - 1, f"___r = format({slots[-1]})", True
    if op == "FORMAT_WITH_SPEC":
        return n - 2, f"___r = format({slots[-2]}, {slots[-1]})", True
    if op == "BUILD_STRING":
        return n - inst.arg, f"___r = ''.join([{', '.join(slots[n - inst.arg :])}])", True
    if op in _UNARY:
        return n - 1, f"___r = {_UNARY[op]}{slots[-1]}", True
    if op == "TO_BOOL":
        return n - 1, f"___r = bool({slots[-1]})", True
    if op == "LOAD_ATTR" and not bc.load_attr_is_method(inst):
        return n - 1, f"___r = {slots[-1]}.{inst.argval}", True
    if op == "STORE_ATTR":
        return n - 2, f"{slots[-1]}.{inst.argval} = {slots[-2]}", False
    if op == "STORE_SUBSCR":
        return n - 3, f"{slots[-2]}[{slots[-1]}] = {slots[-3]}", False
    a, b = slots[-2:] if n >= 2 else (None, None)
    if op == "BINARY_OP":
        symbol = bc.BINARY_OPS[inst.arg]
        if symbol.endswith("=") and symbol not in ("==", "!=", "<=", ">="):
            fn = codegen.bind(getattr(operator, "i" + _INPLACE[symbol[:-1]]), "op")
            return n - 2, f"___r = {fn}({a}, {b})", True
        return n - 2, f"___r = {a} {symbol} {b}", True
    binary = {
        "COMPARE_OP": f"{a} {inst.argval} {b}",
        "BINARY_SUBSCR": f"{a}[{b}]",
        "CONTAINS_OP": f"{a} {'not in' if inst.arg else 'in'} {b}",
        "IS_OP": f"{a} {'is not' if inst.arg else 'is'} {b}",
    }
    if op in binary:
        if op == "COMPARE_OP" and _jump_follows(tx):
            return n - 2, f"___r = bool({binary[op]})", True
        return n - 2, f"___r = {binary[op]}", True
    return None


def _jump_follows(tx: Any) -> bool:
    """The next instruction jumps on the result: the resume function gets the ``bool`` that
    the jump reads (3.13 compiles ``COMPARE_OP`` there to make one, and its jumps read nothing
    else), not an object whose truth the translator cannot tell (numpy's ``bool_``)."""
    if tx.ip + 1 >= len(tx.instructions):
        return False
    return bc.opname(tx.instructions[tx.ip + 1]) in _JUMPS


_INPLACE = {
    "+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
    "@": "matmul", "&": "and", "|": "or", "^": "xor", "<<": "lshift", ">>": "rshift",
}  # fmt: skip


def _native_call(tx: Any, inst: Any, slots: list, caller: str) -> tuple[int, str]:
    """(stack slots left below the call, the call expression) for ``CALL``, ``CALL_KW`` and
    ``CALL_FUNCTION_EX``."""
    stack = tx.stack
    if bc.opname(inst) == "CALL_FUNCTION_EX":
        has_kwargs = bool(inst.arg & 1)
        top = len(stack) - 1
        kwargs = f", **{slots[top]}" if has_kwargs else ""
        top -= has_kwargs
        args, fn = slots[top], slots[top - 1]
        below = top - 1
        if stack[below] is V.NULL:  # callable, NULL (3.13)
            fn = slots[below - 1]
            below -= 1
        elif below > 0 and stack[below - 1] is V.NULL:  # NULL, callable (3.11, 3.12)
            below -= 1
        return below, f"{caller}({fn}, *{args}{kwargs})"
    names = tx.kw_names
    if bc.opname(inst) == "CALL_KW":  # 3.13: the keyword names are on top of the stack
        names = stack[-1].as_python_constant()
        stack, slots = stack[:-1], slots[:-1]
    n = inst.arg
    base = len(stack) - n - 2
    args = slots[len(stack) - n :]
    if stack[base] is V.NULL:  # NULL, callable (3.11, 3.12)
        fn = slots[base + 1]
    elif stack[base + 1] is V.NULL:  # callable, NULL (3.13)
        fn = slots[base]
    else:
        fn, args = slots[base], [slots[base + 1], *args]
    positional = args[: len(args) - len(names)]
    keywords = [f"{k}={v}" for k, v in zip(names, args[len(args) - len(names) :])]
    return base, f"{caller}({', '.join([fn, *positional, *keywords])})"
