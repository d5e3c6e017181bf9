"""Every difference between the Python 3.11, 3.12 and 3.13 bytecode the translator sees, in one place.

The translator works on ``dis.Instruction`` objects whose ``argval`` is
already decoded; what still differs between versions (opcode names, flag
bits packed into ``arg``, which side of a callable its NULL sits on, where
an exhausted ``FOR_ITER`` lands, inline cache sizes) is normalised here.
Opcodes that exist in one version only (3.13's ``CALL_KW``, ``TO_BOOL``...)
simply have their own translator method. Importable without torch.
"""

from __future__ import annotations

import dis
import sys

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)

if sys.version_info < (3, 11) or sys.version_info >= (3, 14):
    raise ImportError(
        f"torchkiln's bytecode capture supports Python 3.11 to 3.13, not {sys.version.split()[0]}"
    )

#: 3.11 spells direction into conditional jumps; 3.12 does not.
_RENAMES = {
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_BACKWARD",
    "LOAD_FAST_CHECK": "LOAD_FAST",
}

#: 3.13's superinstructions, each as the two it fuses; ``argval`` names both locals.
SUPERINSTRUCTIONS = {
    "LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
    "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST"),
    "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
}

#: 3.11 and 3.12 push a call's NULL below the callable, 3.13 above it (``LOAD_GLOBAL``,
#: method ``LOAD_ATTR``, ``LOAD_SUPER_ATTR``, ``PUSH_NULL``, ``CALL``, ``CALL_FUNCTION_EX``).
NULL_BELOW_CALLABLE = not PY313

#: What ``END_FOR`` pops: 3.12's stands for two ``POP_TOP``, 3.13's (followed by one) for one.
END_FOR_POPS = 1 if PY313 else 2

#: 3.12+'s ``SEND`` leaves the delegate below its return value for ``END_SEND`` to pop; 3.11's
#: replaces it.
SEND_KEEPS_RECEIVER = PY312

#: ``BINARY_OP``'s argument indexes this table of (name, symbol).
BINARY_OPS: list[str] = [symbol for _, symbol in dis._nb_ops]  # type: ignore[attr-defined]


def opname(inst: dis.Instruction) -> str:
    """The version-neutral name the translator dispatches on."""
    return _RENAMES.get(inst.opname, inst.opname)


def cache_entries(name: str) -> int:
    """The inline cache units after instruction ``name``: 3.13 indexes them by name."""
    caches = dis._inline_cache_entries  # type: ignore[attr-defined]
    return caches.get(name, 0) if PY313 else caches[dis.opmap[name]]


def load_attr_is_method(inst: dis.Instruction) -> bool:
    """3.12 folds ``LOAD_METHOD`` into ``LOAD_ATTR`` with the low bit of ``arg`` set."""
    if inst.opname == "LOAD_METHOD":
        return True
    return PY312 and inst.opname == "LOAD_ATTR" and bool(inst.arg & 1)


def load_global_pushes_null(inst: dis.Instruction) -> bool:
    """``LOAD_GLOBAL`` pushes a NULL beside the value when the low bit of ``arg`` is set."""
    return bool(inst.arg & 1)


def kw_names(inst: dis.Instruction, consts: tuple) -> tuple[str, ...]:
    """``KW_NAMES`` names a constant tuple; 3.11's ``dis`` leaves it as an index."""
    value = inst.argval
    return value if isinstance(value, tuple) else consts[inst.arg]


def for_iter_exit_skip() -> int:
    """How many instructions an exhausted ``FOR_ITER`` skips at its target: 3.12 jumps past
    ``END_FOR``, 3.13 past ``END_FOR; POP_TOP``, 3.11 lands on it."""
    return 2 if PY313 else 1 if PY312 else 0


def compare_to_bool(inst: dis.Instruction) -> bool:
    """3.13's ``COMPARE_OP`` with bit 16 of ``arg`` converts its result with ``bool`` (the
    compiler sets it where a jump consumes the result, instead of a ``TO_BOOL``)."""
    return PY313 and bool(inst.arg & 16)


def make_function_flags(inst: dis.Instruction) -> tuple[int, ...]:
    """The attributes ``MAKE_FUNCTION`` pops, topmost first (8 closure, 4 annotations,
    2 keyword defaults, 1 defaults); 3.13 sets each with ``SET_FUNCTION_ATTRIBUTE`` instead."""
    if PY313:
        return ()
    return tuple(flag for flag in (8, 4, 2, 1) if inst.arg & flag)


def resumes_yield_from(inst: dis.Instruction) -> bool:
    """The ``RESUME`` after a ``yield from``'s ``YIELD_VALUE`` (3.13 packs more bits above)."""
    return inst.opname == "RESUME" and inst.arg & 3 == 2


def intrinsic_name(inst: dis.Instruction) -> str:
    """The name of a 3.12 ``CALL_INTRINSIC_1`` function (``INTRINSIC_UNARY_POSITIVE``...)."""
    return inst.argrepr
