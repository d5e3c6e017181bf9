"""Resume functions: the rest of a frame, from one instruction on, as a new code object.

A resume function takes the frame's bound locals (under their own names,
in the frame's order, so that a method's ``self`` stays first for
zero-argument ``super()``), the live stack (``___stack0``...) and the
contents of its cells (``___cell_<name>``) as positional arguments. Its code is a prologue that
recreates the cells, pushes the stack back (``PUSH_NULL`` for NULL slots,
``GET_ITER`` after loading a list for an iterator that was live) and jumps
to the instruction, followed by the original code unchanged, exception
table included, so ``try`` and ``with`` handlers still work around it.
Resume code objects are cached by (code, offset, stack layout, locals):
the same break always resumes through the same code object, hence the
same cache entries.
"""

from __future__ import annotations

import inspect
import types

from torchkiln.capture.bytecode import Handler, Instr, assemble, disassemble

VALUE, NULL, ITER = "value", "null", "iter"

_resume_codes: dict[tuple, types.CodeType] = {}


def stack_arg(i: int) -> str:
    return f"___stack{i}"


def cell_arg(name: str) -> str:
    return f"___cell_{name}"


def resume_code(
    code: types.CodeType,
    offset: int,
    stack_kinds: tuple[str, ...],
    local_names: tuple[str, ...],
    cell_names: tuple[str, ...] = (),
) -> types.CodeType:
    """The code object that continues ``code`` at ``offset`` (an offset ``dis`` reported).

    ``cell_names`` are the frame's cells (locals captured by inner
    functions) whose contents are passed in (as ``___cell_<name>``).
    """
    key = (code, offset, stack_kinds, local_names, cell_names)
    cached = _resume_codes.get(key)
    if cached is not None:
        return cached
    instrs = disassemble(code)
    target = next(i for i in instrs if offset in (i.offset, i.origin))
    # Locals first: a live ``self`` stays the first argument, which zero-argument super() reads.
    args = [*local_names, *(stack_arg(i) for i, kind in enumerate(stack_kinds) if kind != NULL)]
    args += [cell_arg(name) for name in cell_names]
    prologue = [Instr("MAKE_CELL", argval=name) for name in code.co_cellvars]
    if code.co_freevars:
        prologue.append(Instr("COPY_FREE_VARS", len(code.co_freevars)))
    prologue.append(Instr("RESUME", 0))
    for name in cell_names:
        prologue += [Instr("LOAD_FAST", argval=cell_arg(name)), Instr("STORE_DEREF", argval=name)]
    for i, kind in enumerate(stack_kinds):
        if kind == NULL:
            prologue.append(Instr("PUSH_NULL"))
            continue
        prologue.append(Instr("LOAD_FAST", argval=stack_arg(i)))
        if kind == ITER:
            prologue.append(Instr("GET_ITER"))
    prologue.append(Instr("JUMP_FORWARD", target=target))
    for instr in prologue:
        instr.lineno = target.lineno
    varnames = tuple(
        args + [v for v in code.co_varnames if v not in args and v not in code.co_cellvars]
    )
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    name = f"torchkiln_resume_in_{code.co_name}_at_{target.lineno}"
    new = assemble(
        prologue + instrs,
        code,
        varnames=varnames,
        argcount=len(args),
        name=name,
        flags=flags,
        extra_stack=len(stack_kinds) + 1,
    )
    _resume_codes[key] = new
    return new


def handler_at(code: types.CodeType, offset: int) -> Handler | None:
    """The exception handler (``try``/``with``) that covers the instruction at ``offset``, if any."""
    instrs = disassemble(code)
    return next(i for i in instrs if offset in (i.offset, i.origin)).handler


def clear_resume_codes() -> None:
    _resume_codes.clear()
