"""Checking options against the schema a backend declares (``Backend.options``).

One checker for every backend: ``torchkiln.compile`` runs it before anything is
captured, so a misspelled key or a value of the wrong type or outside its choices
fails at once, in one line naming the option, the backend and what to pass. A
plugin that parses its own options (``torchkiln_inductor.options``) calls the same
function, so its compile function called directly checks them the same way.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchkiln.exc import InvalidOptionError, NotImplementedYet

if TYPE_CHECKING:
    from torchkiln.plugin import Option


def option_mapping(backend: str, options: object) -> dict[str, Any]:
    """``options`` as a dict, once it is a mapping with string keys."""
    if not isinstance(options, Mapping):
        raise InvalidOptionError(
            f"options for backend {backend!r} must be a mapping of option name to value, "
            f"e.g. options={{'name': value}}; got {type(options).__name__} {options!r}"
        )
    for key in options:
        if not isinstance(key, str):
            raise InvalidOptionError(
                f"option names of backend {backend!r} are strings; got {type(key).__name__} "
                f"{key!r} in options"
            )
    return dict(options)


def check_options(backend: str, schema: Sequence[Option] | None, options: object) -> dict[str, Any]:
    """``options`` as a dict, after checking each key and value against ``schema``."""
    given = option_mapping(backend, options)
    if not given:
        return given
    declared = {option.name: option for option in schema or ()}
    if not declared:
        raise InvalidOptionError(
            f"backend {backend!r} takes no options, got {', '.join(map(repr, given))}; "
            "leave options out"
        )
    for key, value in given.items():
        option = declared.get(key)
        if option is None:
            raise InvalidOptionError(
                f"backend {backend!r} has no option {key!r}.{did_you_mean(key, declared)} "
                f"Valid options: {', '.join(sorted(declared))}"
            )
        _check_value(backend, option, value)
    return given


def _check_value(backend: str, option: Option, value: Any) -> None:
    where = f"option {option.name!r} of backend {backend!r}"
    if option.type is not None and not _has_type(value, option.type):
        raise InvalidOptionError(
            f"{where} expects {_type_name(option.type)}, got {type(value).__name__} "
            f"({value!r}); pass {_type_name(option.type)} (the default is {option.default!r})"
        )
    if not option.implemented and value != option.default:
        raise NotImplementedYet(
            f"{where} is not implemented yet; leave it at its default ({option.default!r})"
        )
    if option.choices is not None and value not in option.choices:
        hint = did_you_mean(value, option.choices) if isinstance(value, str) else ""
        raise InvalidOptionError(
            f"{where} must be one of {', '.join(map(repr, option.choices))}, got {value!r}.{hint}"
        )
    if option.minimum is not None and value is not None and value < option.minimum:
        raise InvalidOptionError(f"{where} must be >= {option.minimum}, got {value!r}")


def _has_type(value: Any, expected: type | tuple[type, ...]) -> bool:
    """``isinstance``, except that a bool is no int: ``True`` for a count is a mistake."""
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)


def _type_name(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join("None" if t is type(None) else t.__name__ for t in types)


def did_you_mean(word: str, names: Iterable[Any]) -> str:
    """`` Did you mean 'x'?`` for the name closest to ``word`` (case aside), or ``""``."""
    by_folded = {n.casefold(): n for n in names if isinstance(n, str)}
    close = difflib.get_close_matches(word.casefold(), list(by_folded), n=1)
    return f" Did you mean {by_folded[close[0]]!r}?" if close else ""
