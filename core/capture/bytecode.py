"""A small disassembler/assembler for CPython 3.11 to 3.13 code objects.

``disassemble(code)`` gives a list of ``Instr`` whose jump targets and
exception handlers point at other ``Instr`` objects (not offsets), so code
can be prepended, and locals renamed, freely. ``assemble`` lays the list
out again: it recomputes jump arguments, ``EXTENDED_ARG`` prefixes and
inline caches until offsets are stable, then encodes the exception table
(``co_exceptiontable``) and line table (``co_linetable``, one entry per
instruction, line numbers only).

Used to build resume functions (``resume.py``). Imports nothing outside
the standard library but ``bytecode_compat`` (relatively, so that
``tests/core/capture/test_bytecode.py`` can load both by path and run under a
Python that has no torch).
"""

from __future__ import annotations

import dis
import functools
import types
from dataclasses import dataclass
from typing import Any

from . import bytecode_compat as bc

_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_CACHE = dis.opmap["CACHE"]
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)
_LOCALS = set(dis.haslocal)
_FREE = set(dis.hasfree)


@dataclass(eq=False)
class Handler:
    """An exception-table entry's handler: where to go, the stack depth, push ``lasti``."""

    target: Instr
    depth: int
    lasti: bool


@dataclass(eq=False)
class Instr:
    """One instruction; ``target`` for jumps, ``handler`` when covered by the exception table."""

    opname: str
    arg: int | None = None
    argval: Any = None
    target: Instr | None = None
    handler: Handler | None = None
    lineno: int | None = None
    offset: int = -1  # set by disassemble/assemble: start of the instruction, prefixes included
    origin: int = -1  # the offset ``dis`` gave this instruction in the code it came from

    @property
    def opcode(self) -> int:
        return dis.opmap[self.opname]

    def __repr__(self) -> str:
        where = f" -> {self.target.offset}" if self.target is not None else ""
        return f"Instr({self.opname} {self.argval!r}{where} @{self.offset})"


@functools.lru_cache(maxsize=4096)
def instructions(code: types.CodeType) -> tuple[dis.Instruction, ...]:
    """``dis.get_instructions(code)``, computed once per code object and shared read-only:
    a model inlines, breaks in and resumes the same functions many times, and ``dis`` is
    slow (a fifth of a warm HF start when every inline disassembled again)."""
    return tuple(dis.get_instructions(code))


def disassemble(code: types.CodeType) -> list[Instr]:
    """``code``'s instructions, ``EXTENDED_ARG`` folded, jumps and handlers linked."""
    every = instructions(code)
    raw = [i for i in every if i.opname != "EXTENDED_ARG"]
    instrs: list[Instr] = []
    by_offset: dict[int, Instr] = {}
    prefix_start: dict[int, int] = {}
    pending = None
    for inst in every:
        if inst.opname == "EXTENDED_ARG":
            pending = inst.offset if pending is None else pending
            continue
        prefix_start[inst.offset] = pending if pending is not None else inst.offset
        pending = None
    for inst in raw:
        lineno = inst.positions.lineno if inst.positions is not None else None
        new = Instr(
            inst.opname,
            inst.arg,
            inst.argval,
            lineno=lineno,
            offset=prefix_start[inst.offset],
            origin=inst.offset,
        )
        instrs.append(new)
        by_offset[inst.offset] = new
        by_offset[prefix_start[inst.offset]] = new
    for inst, new in zip(raw, instrs):
        if inst.opcode in _JUMPS:
            new.target = by_offset[inst.argval]
    for start, end, target, depth, lasti in _parse_exception_table(code.co_exceptiontable):
        handler = Handler(by_offset[target], depth, lasti)
        for new in instrs:
            if start <= new.offset < end:
                new.handler = handler
    return instrs


def handler_at(code: types.CodeType, offset: int) -> int | None:
    """The offset of the handler an exception raised at ``offset`` jumps to, or None."""
    entry = handler_entry(code, offset)
    return None if entry is None else entry[0]


@functools.lru_cache(maxsize=1024)
def handler_entry(code: types.CodeType, offset: int) -> tuple[int, int, bool] | None:
    """The exception-table entry covering ``offset``: (handler offset, stack depth, whether
    ``lasti`` is pushed), or None."""
    for start, end, target, depth, lasti in _parse_exception_table(code.co_exceptiontable):
        if start <= offset < end:
            return target, depth, lasti
    return None


def _parse_exception_table(table: bytes) -> list[tuple[int, int, int, int, bool]]:
    entries = []
    it = iter(table)

    def varint() -> int:
        b = next(it)
        value = b & 63
        while b & 64:
            b = next(it)
            value = (value << 6) | (b & 63)
        return value

    try:
        while True:
            start = varint() * 2
            length = varint() * 2
            target = varint() * 2
            dl = varint()
            entries.append((start, start + length, target, dl >> 1, bool(dl & 1)))
    except StopIteration:
        return entries


def _encode(opname: str, arg: int | tuple[int, int]) -> bytes:
    """An instruction's bytes: ``EXTENDED_ARG`` prefixes, opcode and argument, inline caches.

    A 3.13 superinstruction's argument is its two locals' indexes, packed in 4 bits each
    where both fit; else it is written as the two instructions it fuses.
    """
    if isinstance(arg, tuple):
        first, second = arg
        if first > 15 or second > 15:
            one, two = bc.SUPERINSTRUCTIONS[opname]
            return _encode(one, first) + _encode(two, second)
        arg = first << 4 | second
    out = bytearray()
    for shift in (24, 16, 8):
        if arg > (1 << shift) - 1:
            out += bytes([_EXTENDED_ARG, (arg >> shift) & 0xFF])
    out += bytes([dis.opmap[opname], arg & 0xFF])
    out += bytes([_CACHE, 0]) * bc.cache_entries(opname)
    return bytes(out)


def _size(instr: Instr, arg: int | tuple[int, int]) -> int:
    """Code units (2 bytes each) of ``instr`` with its prefixes and caches (``_encode``'s)."""
    if isinstance(arg, tuple):
        return len(_encode(instr.opname, arg)) // 2
    prefixes = 0 if arg <= 0xFF else 1 if arg <= 0xFFFF else 2 if arg <= 0xFFFFFF else 3
    return prefixes + 1 + bc.cache_entries(instr.opname)


def assemble(
    instrs: list[Instr],
    template: types.CodeType,
    *,
    varnames: tuple[str, ...],
    argcount: int,
    name: str,
    flags: int | None = None,
    extra_stack: int = 0,
) -> types.CodeType:
    """Lay ``instrs`` out as a code object shaped like ``template`` (consts, names, free vars)."""
    cells = [c for c in template.co_cellvars if c not in varnames]
    localsplus = list(varnames) + cells + list(template.co_freevars)
    args = [_fixed_arg(i, localsplus) for i in instrs]
    while True:
        offset = 0
        for instr, arg in zip(instrs, args):
            instr.offset = offset
            offset += 2 * _size(instr, arg or 0)
        changed = False
        for k, instr in enumerate(instrs):
            if instr.target is None:
                continue
            after = instr.offset + 2 * _size(instr, args[k] or 0)
            distance = instr.target.offset - after
            new = (-distance if "BACKWARD" in instr.opname else distance) // 2
            if new < 0:
                raise ValueError(
                    f"{instr.opname} cannot jump from {instr.offset} to {instr.target.offset}"
                )
            if new != args[k]:
                args[k] = new
                changed = True
        if not changed:
            break
    code = b"".join(_encode(instr.opname, arg or 0) for instr, arg in zip(instrs, args))
    return template.replace(
        co_code=code,
        co_varnames=tuple(varnames),
        co_nlocals=len(varnames),
        co_argcount=argcount,
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=template.co_flags if flags is None else flags,
        co_stacksize=template.co_stacksize + extra_stack,
        co_linetable=_line_table(instrs, args, template.co_firstlineno),
        co_exceptiontable=_exception_table(instrs, args),
        co_name=name,
        co_qualname=name,
    )


def _fixed_arg(instr: Instr, localsplus: list[str]) -> int | tuple[int, int] | None:
    """The argument that does not depend on layout: locals and free variables by name (3.13
    reads a cell passed to a closure with ``LOAD_FAST``; its superinstructions name two)."""
    if instr.opcode in _LOCALS:
        if isinstance(instr.argval, tuple):
            first, second = instr.argval
            return localsplus.index(first), localsplus.index(second)
        return localsplus.index(instr.argval)
    if instr.opcode in _FREE:
        return localsplus.index(instr.argval)
    if instr.target is not None:
        return 0
    return instr.arg


def _line_table(instrs: list[Instr], args: list, first_line: int) -> bytes:
    out = bytearray()
    line = first_line
    for instr, arg in zip(instrs, args):
        units = _size(instr, arg or 0)
        while units:
            chunk = min(units, 8)
            units -= chunk
            if instr.lineno is None:
                out.append(0x80 | (15 << 3) | (chunk - 1))
                continue
            out.append(0x80 | (13 << 3) | (chunk - 1))
            delta = instr.lineno - line
            line = instr.lineno
            out += _varint_le((-delta << 1) | 1 if delta < 0 else delta << 1)
    return bytes(out)


def _varint_le(value: int) -> bytes:
    out = bytearray()
    while value >= 64:
        out.append(0x40 | (value & 63))
        value >>= 6
    out.append(value)
    return bytes(out)


def _varint_be(value: int, first: bool) -> bytes:
    chunks = [value & 63]
    value >>= 6
    while value:
        chunks.append(value & 63)
        value >>= 6
    chunks.reverse()
    out = bytearray(c | 0x40 for c in chunks[:-1])
    out.append(chunks[-1])
    if first:
        out[0] |= 0x80
    return bytes(out)


def _exception_table(instrs: list[Instr], args: list) -> bytes:
    out = bytearray()
    k = 0
    while k < len(instrs):
        handler = instrs[k].handler
        if handler is None:
            k += 1
            continue
        start = instrs[k].offset
        while k < len(instrs) and instrs[k].handler is handler:
            k += 1
        last = instrs[k - 1]
        end = last.offset + 2 * _size(last, args[k - 1] or 0)
        out += _varint_be(start // 2, True)
        out += _varint_be((end - start) // 2, False)
        out += _varint_be(handler.target.offset // 2, False)
        out += _varint_be((handler.depth << 1) | handler.lasti, False)
    return bytes(out)
