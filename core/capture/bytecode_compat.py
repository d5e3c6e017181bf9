"""Every difference between the Python 3.11 and 3.12 bytecode the translator sees, in one place.

The translator works on ``dis.Instruction`` objects whose ``argval`` is
already decoded; what still differs between versions (opcode names, flag
bits packed into ``arg``, where an exhausted ``FOR_ITER`` lands) is
normalised here. Importable without torch.
"""

from __future__ import annotations

import dis
import sys

PY312 = sys.version_info >= (3, 12)

if sys.version_info < (3, 11) or sys.version_info >= (3, 13):
    raise ImportError(
        f"torchkiln's bytecode capture supports Python 3.11 and 3.12, not {sys.version.split()[0]}"
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

#: ``BINARY_OP``'s argument indexes this table of (name, symbol).
BINARY_OPS: list[str] = [symbol for _, symbol in dis._nb_ops]  # type: ignore[attr-defined]


def opname(inst: dis.Instruction) -> str:
    """The version-neutral name the translator dispatches on."""
    return _RENAMES.get(inst.opname, inst.opname)


def load_attr_is_method(inst: dis.Instruction) -> bool:
    """3.12 folds ``LOAD_METHOD`` into ``LOAD_ATTR`` with the low bit of ``arg`` set."""
    if inst.opname == "LOAD_METHOD":
        return True
    return PY312 and inst.opname == "LOAD_ATTR" and bool(inst.arg & 1)


def load_global_pushes_null(inst: dis.Instruction) -> bool:
    """``LOAD_GLOBAL`` pushes a NULL below the value when the low bit of ``arg`` is set."""
    return bool(inst.arg & 1)


def kw_names(inst: dis.Instruction, consts: tuple) -> tuple[str, ...]:
    """``KW_NAMES`` names a constant tuple; 3.11's ``dis`` leaves it as an index."""
    value = inst.argval
    return value if isinstance(value, tuple) else consts[inst.arg]


def for_iter_exit_skips_end_for() -> bool:
    """An exhausted 3.12 ``FOR_ITER`` pops the iterator and jumps past ``END_FOR``."""
    return PY312


def intrinsic_name(inst: dis.Instruction) -> str:
    """The name of a 3.12 ``CALL_INTRINSIC_1`` function (``INTRINSIC_UNARY_POSITIVE``...)."""
    return inst.argrepr
