"""``unittest.TestCase.assert*`` called in traced code (``self.assertEqual(x.shape, ...)``).

``unittest`` is standard library, so it is not traced; each assertion is modelled by a
stand-in below that tests what the real one tests and is inlined in its place. A passing
assertion costs nothing in the graph. A failing one (``failed``) breaks the graph there,
and the real method then raises natively, with its own message.

``assertEqual`` picks a type-specific method by the operands' type
(``_type_equality_funcs``); the model holds where that table and those methods are
unittest's own (guarded).
"""

from __future__ import annotations

import unittest
from typing import TYPE_CHECKING, Any

from torchkiln.capture.variables import objects
from torchkiln.capture.variables.base import VariableTracker, class_lookup
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator

#: What ``assertEqual`` dispatches on in a ``TestCase`` that registered nothing more.
_EQUALITY_FUNCS = unittest.TestCase()._type_equality_funcs


def failed(name: str) -> None:
    """Called by a stand-in whose assertion fails; in traced code it breaks the graph."""
    raise AssertionError(name)  # never run: ``PYTHON_FUNCTIONS`` models it


def assert_equal(self: Any, first: Any, second: Any, msg: Any = None) -> None:
    if not first == second:  # noqa: SIM201 (unittest's own test)
        failed("assertEqual")


def assert_not_equal(self: Any, first: Any, second: Any, msg: Any = None) -> None:
    if not first != second:  # noqa: SIM202 (unittest's own test)
        failed("assertNotEqual")


def assert_true(self: Any, expr: Any, msg: Any = None) -> None:
    if not expr:
        failed("assertTrue")


def assert_false(self: Any, expr: Any, msg: Any = None) -> None:
    if expr:
        failed("assertFalse")


def assert_is(self: Any, expr1: Any, expr2: Any, msg: Any = None) -> None:
    if expr1 is not expr2:
        failed("assertIs")


def assert_is_not(self: Any, expr1: Any, expr2: Any, msg: Any = None) -> None:
    if expr1 is expr2:
        failed("assertIsNot")


def assert_is_none(self: Any, obj: Any, msg: Any = None) -> None:
    if obj is not None:
        failed("assertIsNone")


def assert_is_not_none(self: Any, obj: Any, msg: Any = None) -> None:
    if obj is None:
        failed("assertIsNotNone")


def assert_in(self: Any, member: Any, container: Any, msg: Any = None) -> None:
    if member not in container:
        failed("assertIn")


def assert_not_in(self: Any, member: Any, container: Any, msg: Any = None) -> None:
    if member in container:
        failed("assertNotIn")


def assert_is_instance(self: Any, obj: Any, cls: Any, msg: Any = None) -> None:
    if not isinstance(obj, cls):
        failed("assertIsInstance")


def assert_not_is_instance(self: Any, obj: Any, cls: Any, msg: Any = None) -> None:
    if isinstance(obj, cls):
        failed("assertNotIsInstance")


def assert_greater(self: Any, a: Any, b: Any, msg: Any = None) -> None:
    if not a > b:
        failed("assertGreater")


def assert_greater_equal(self: Any, a: Any, b: Any, msg: Any = None) -> None:
    if not a >= b:
        failed("assertGreaterEqual")


def assert_less(self: Any, a: Any, b: Any, msg: Any = None) -> None:
    if not a < b:
        failed("assertLess")


def assert_less_equal(self: Any, a: Any, b: Any, msg: Any = None) -> None:
    if not a <= b:
        failed("assertLessEqual")


def assert_almost_equal(
    self: Any, first: Any, second: Any, places: Any = None, msg: Any = None, delta: Any = None
) -> None:
    if first == second:
        return
    if delta is not None and places is not None:
        failed("assertAlmostEqual")  # a TypeError, raised natively
    diff = abs(first - second)
    if delta is not None:
        if not diff <= delta:
            failed("assertAlmostEqual")
    elif round(diff, 7 if places is None else places) != 0:
        failed("assertAlmostEqual")


def _sequence_equal(name: str, seq_type: type) -> Any:
    def stand_in(self: Any, first: Any, second: Any, msg: Any = None) -> None:
        if not (isinstance(first, seq_type) and isinstance(second, seq_type)):
            failed(name)
        if not first == second:  # noqa: SIM201
            failed(name)

    return stand_in


_STAND_INS = {
    "assertEqual": assert_equal,
    "assertNotEqual": assert_not_equal,
    "assertTrue": assert_true,
    "assertFalse": assert_false,
    "assertIs": assert_is,
    "assertIsNot": assert_is_not,
    "assertIsNone": assert_is_none,
    "assertIsNotNone": assert_is_not_none,
    "assertIn": assert_in,
    "assertNotIn": assert_not_in,
    "assertIsInstance": assert_is_instance,
    "assertNotIsInstance": assert_not_is_instance,
    "assertGreater": assert_greater,
    "assertGreaterEqual": assert_greater_equal,
    "assertLess": assert_less,
    "assertLessEqual": assert_less_equal,
    "assertAlmostEqual": assert_almost_equal,
    "assertListEqual": _sequence_equal("assertListEqual", list),
    "assertTupleEqual": _sequence_equal("assertTupleEqual", tuple),
}


def _check_equality_funcs(
    tx: Translator, case: VariableTracker, first: VariableTracker, second: VariableTracker
) -> None:
    """``assertEqual(first, second)`` compares with ``==`` as modelled: the type-specific
    method it would pick, if any, is unittest's own, and the instance registered no other."""
    if not isinstance(case, objects.UserObjectVariable) or case.value is None or not case.source:
        raise Unsupported(f"assertEqual of {case.describe()} (its comparisons are not known)")
    if case.value._type_equality_funcs != _EQUALITY_FUNCS:
        raise Unsupported("assertEqual of a TestCase with its own addTypeEqualityFunc")
    table = tx.output.guards.bind(_EQUALITY_FUNCS, "eqfuncs")
    check = f"{case.source}._type_equality_funcs == {table}"
    tx.output.guards.add(check, 2, f"{case.source} registered no type equality function")
    kind = first.python_type()
    name = _EQUALITY_FUNCS.get(kind)
    if name is None or kind is not second.python_type():
        return
    if class_lookup(case.cls, name) is not unittest.TestCase.__dict__[name]:
        raise Unsupported(f"assertEqual through {case.cls.__name__}'s own {name}")
    tx.output.guard_class_member(case, name)


def _modelled(name: str) -> Any:
    stand_in = _STAND_INS[name]

    def handler(tx: Translator, case: VariableTracker, *args: Any, **kwargs: Any) -> Any:
        if name == "assertEqual" and len(args) >= 2:
            _check_equality_funcs(tx, case, args[0], args[1])
        return tx.inline_call(stand_in, [case, *args], kwargs)

    return handler


def _failed(tx: Translator, name: VariableTracker) -> None:
    raise Unsupported(f"{name.as_python_constant()} fails: the real one raises, with its message")


#: unittest's assertions modelled here (``builtins.python_function``), and ``failed``.
PYTHON_FUNCTIONS: dict[Any, Any] = {
    **{unittest.TestCase.__dict__[name]: _modelled(name) for name in _STAND_INS},
    failed: _failed,
}
