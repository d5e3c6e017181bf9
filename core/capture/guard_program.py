"""The checks of a guard function that C++ makes: guard expressions to a ``guard_program``.

Guards are Python expressions (``guards.GuardSet``), and most have one of a few shapes
over a *source*, a chain of ``.attr`` and ``[key]`` reads from a guard argument or a
bound object (``L_self._modules['fc']._parameters['weight']``): a type or identity
check, a comparison with a constant, a key that must be missing, a length, hooks that
must be empty, a tensor's metadata. :func:`translate` turns each guard of those shapes
into a check of the C++ program (``native_guards.cpp``), its source into nodes that the
program reads once a call, shared by every check that reads them; the rest stay Python.

Parsing is by regular expressions over the texts ``GuardSet`` writes, not ``ast``: a
model has a thousand guards, and a warm start compiles them all.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

#: How a node is read (``native_guards.cpp``: ``Step``): an argument, a constant, or from
#: its parent: ``.attr``, ``[key]``, ``()`` (a call without arguments), ``type(parent)``.
STEP_ARG, STEP_CONST, STEP_ATTR, STEP_ITEM, STEP_CALL, STEP_TYPE = range(6)
#: What a check tests (``native_guards.cpp``: ``Op``).
(
    OP_TYPE_IS, OP_IS, OP_ID_EQ, OP_EQ, OP_NOT_IN, OP_LEN_EQ, OP_FALSY, OP_LIST_EQ, OP_TENSOR,
    OP_TRUTHY, OP_IS_NODE, OP_SIGN, OP_DATA_PTR,
) = range(13)  # fmt: skip

_NAME = r"[A-Za-z_]\w*"
_STEPS = rf"(?:\.{_NAME}|\[(?:'[^'\\]*'|\"[^\"\\]*\"|-?\d+)\]|\(\))*"
#: A source: a name, or the type of a source that starts with one, then steps.
_SOURCE = rf"(?:type\({_NAME}{_STEPS}\)|{_NAME}){_STEPS}"
_SOURCE_RE = re.compile(_SOURCE)
_STEP = re.compile(rf"\.({_NAME})|\[('[^'\\]*'|\"[^\"\\]*\"|-?\d+)\]|(\(\))")
_ROOT = re.compile(_NAME)
_TYPE_OF = re.compile(rf"type\(({_NAME}{_STEPS})\)")

#: ``(pattern, op, group of the source, group of the operand)`` of the shapes that start
#: with a builtin's call or a key (``ProgramBuilder._called``).
_CALL_SHAPES = [
    (re.compile(rf"id\(({_SOURCE})\) == ({_NAME})"), OP_ID_EQ, 1, 2),
    (re.compile(rf"len\(({_SOURCE})\) == (\d+)"), OP_LEN_EQ, 1, 2),
    (re.compile(rf"list\(({_SOURCE})\) == (\[.*\])"), OP_LIST_EQ, 1, 2),
    (re.compile(rf"(.+) not in ({_SOURCE})"), OP_NOT_IN, 2, 1),
]
_TYPE_IS = re.compile(rf"type\(({_SOURCE})\) is ({_NAME})")
_NOT = re.compile(rf"not ({_SOURCE})|not \(({_SOURCE}(?: or {_SOURCE})+)\)")
_DISJOINT = re.compile(rf"({_SOURCE})\.isdisjoint\((\(.*\))\)")
#: what follows ``math.copysign``'s bound name in ``copysign(1.0, S) == 1.0``
_COPYSIGN_REST = re.compile(rf"\(1\.0, ({_SOURCE})\) == (-?1\.0)")
#: The builtins the shapes call: a namespace that rebinds one keeps those guards in Python.
_CALLED = ("type", "id", "len", "list")
_CALLING_OPS = (OP_TYPE_IS, OP_ID_EQ, OP_LEN_EQ, OP_LIST_EQ)

_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?(?:\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+)")
_PLAIN_STRING = re.compile(r"'[^'\\]*'")
_CONSTANTS = {"None": None, "True": True, "False": False, "Ellipsis": Ellipsis}


class NotNative(Exception):
    """A guard (or one of its parts) the program can't check: it stays Python."""


class ProgramBuilder:
    """Nodes and checks of one guard function's program (``args``: its parameter names,
    ``ns``: its namespace; ``module_dicts``: ``GuardSet.module_dicts``, the sources whose
    attributes the guard reads from ``__dict__``, as ``guards.hoist`` does)."""

    def __init__(
        self,
        args: Sequence[str],
        ns: Mapping[str, Any],
        module_dicts: Mapping[str, Container[str]],
    ):
        self.args = list(args)
        self.ns = ns
        self.module_dicts = module_dicts
        self.nodes: list[tuple[int, int, Any]] = []
        self.checks: list[tuple[int, int, Any]] = []
        self._node_of: dict[str, int] = {}
        self._tensors: set[str] = set()
        self._builtins_rebound = any(name in ns for name in _CALLED)

    def add(self, expr: str, tensor: tuple | None = None) -> bool:
        """Add the checks of guard ``expr`` (``tensor``: its ``Guard.tensor`` spec, which
        stands for the whole guard); whether the program makes them."""
        try:
            if tensor is not None:
                self._add_tensor(tensor)
            else:
                for node, op, operand in self._parse(expr):
                    self.checks.append((node, op, operand))
        except NotNative:
            return False
        return True

    def _add_tensor(self, spec: tuple) -> None:
        source, rest = spec[0], spec[1:]
        node = self.node(source)
        if source not in self._tensors:
            self._tensors.add(source)
            self.checks.append((node, OP_TENSOR, rest))

    def _parse(self, expr: str) -> list[tuple[int, int, Any]]:
        """Every check ``expr`` is made of, all parsed before any is added. The common
        shapes (``S is X``, ``S == X``, ``type(S) is T``, ``S``) read the source once and
        branch on what follows it; the rarer ones are tried by their first word."""
        if expr.startswith("not "):
            return self._falsy(expr)
        if expr.startswith(("id(", "len(", "list(")) or expr[:1] in "'\"":
            return self._called(expr)
        if (
            expr.startswith("type(")
            and (match := _TYPE_IS.fullmatch(expr))
            and not self._builtins_rebound
        ):
            return [(self.node(match.group(1)), OP_TYPE_IS, self.value(match.group(2)))]
        if match := _DISJOINT.fullmatch(expr):
            keys = self.value(match.group(2))
            if type(keys) is not tuple:
                raise NotNative(expr)
            node = self.node(match.group(1))
            return [(node, OP_NOT_IN, key) for key in keys]
        source = _SOURCE_RE.match(expr)
        if source is None:
            raise NotNative(expr)
        text, rest = source.group(), expr[source.end() :]
        if rest.startswith("(1.0, ") and self.ns.get(text) is math.copysign:
            if match := _COPYSIGN_REST.fullmatch(rest):
                return [(self.node(match.group(1)), OP_SIGN, float(match.group(2)))]
            raise NotNative(expr)
        if not rest:
            return [(self.node(text), OP_TRUTHY, None)]
        if rest.startswith(" == "):
            return [(self.node(text), OP_EQ, self.value(rest[4:]))]
        if not rest.startswith(" is "):
            raise NotNative(expr)
        operand = rest[4:]
        node = self.node(text)
        try:
            return [(node, OP_IS, self.value(operand))]
        except NotNative:  # ``a is b``, both read per call
            if not _SOURCE_RE.fullmatch(operand):
                raise
            return [(node, OP_IS_NODE, self.node(operand))]

    def _falsy(self, expr: str) -> list[tuple[int, int, Any]]:
        """``not S`` and ``not (S1 or S2 ...)``: each source falsy."""
        match = _NOT.fullmatch(expr)
        if match is None:
            raise NotNative(expr)
        sources = (match.group(1) or match.group(2)).split(" or ")
        if not all(_SOURCE_RE.fullmatch(s) for s in sources):
            raise NotNative(expr)  # " or " inside a key
        return [(self.node(s), OP_FALSY, None) for s in sources]

    def _called(self, expr: str) -> list[tuple[int, int, Any]]:
        """``id(S) == N``, ``len(S) == n``, ``list(S) == [...]``, ``'k' not in S``."""
        for pattern, op, source, operand in _CALL_SHAPES:
            if match := pattern.fullmatch(expr):
                if op in _CALLING_OPS and self._builtins_rebound:
                    raise NotNative(expr)
                return [(self.node(match.group(source)), op, self.value(match.group(operand)))]
        raise NotNative(expr)

    def node(self, source: str) -> int:
        """The node of ``source``, with those of its prefixes (made once, shared): the
        steps after the longest prefix made already are made."""
        known = self._node_of.get(source)
        if known is not None:
            return known
        if self._builtins_rebound and "type(" in source:
            raise NotNative(source)
        root = _TYPE_OF.match(source) or _ROOT.match(source)
        assert root is not None
        steps = []
        end = root.end()
        while step := _STEP.match(source, end):
            end = step.end()
            steps.append((end, *step.groups()))
        if end != len(source):
            raise NotNative(source)
        made = len(steps)
        while made and source[: steps[made - 1][0]] not in self._node_of:
            made -= 1
        if made:
            path = source[: steps[made - 1][0]]
            node = self._node_of[path]
        elif root.re is _TYPE_OF:
            path = root.group()
            node = self._child(path, self.node(root.group(1)), STEP_TYPE, None)
        else:
            path = root.group()
            node = self._root(path)
        for end, attr, key, call in steps[made:]:
            if call is not None:
                node = self._child(f"{path}()", node, STEP_CALL, None)
            elif attr is not None and attr in self.module_dicts.get(path, ()):
                node = self._child(f"{path}.__dict__", node, STEP_ATTR, "__dict__")
                if attr != "__dict__":
                    node = self._child(f"{path}.{attr}", node, STEP_ITEM, attr)
            elif attr is not None:
                node = self._child(f"{path}.{attr}", node, STEP_ATTR, attr)
            else:
                node = self._child(f"{path}[{key}]", node, STEP_ITEM, self.value(key))
            path = source[:end]
        return node

    def _root(self, name: str) -> int:
        if name in self._node_of:
            return self._node_of[name]
        if name in self.args:
            return self._new(name, (-1, STEP_ARG, self.args.index(name)))
        if name in self.ns:
            return self._new(name, (-1, STEP_CONST, self.ns[name]))
        raise NotNative(name)  # a builtin, or a name bound later

    def _child(self, path: str, parent: int, step: int, operand: Any) -> int:
        if path in self._node_of:
            return self._node_of[path]
        return self._new(path, (parent, step, operand))

    def _new(self, path: str, node: tuple[int, int, Any]) -> int:
        self.nodes.append(node)
        self._node_of[path] = len(self.nodes) - 1
        return len(self.nodes) - 1

    def value(self, text: str) -> Any:
        """The constant ``text`` stands for: a literal, or a name bound in the namespace,
        or a tuple or list of those."""
        text = text.strip()
        if text in self.args:
            raise NotNative(text)  # read per call, not a constant
        if text in self.ns and _ROOT.fullmatch(text):
            return self.ns[text]
        if text in _CONSTANTS:
            return _CONSTANTS[text]
        if _INT.fullmatch(text):
            return int(text)
        if _FLOAT.fullmatch(text):
            return float(text)
        if _PLAIN_STRING.fullmatch(text):
            return text[1:-1]
        if (text[:1], text[-1:]) in (("(", ")"), ("[", "]")):
            parts = _split_items(text[1:-1])
            if text[0] == "(" and len(parts) == 1 and not text[1:-1].rstrip().endswith(","):
                raise NotNative(text)  # parentheses around one value, not a tuple
            items = [self.value(t) for t in parts]
            return items if text[0] == "[" else tuple(items)
        try:
            return ast.literal_eval(text)  # a string with escapes, a bytes literal
        except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
            raise NotNative(text) from e


def _split_items(text: str) -> list[str]:
    """The items of a tuple or list display, split at its top-level commas."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == "\\":
                raise NotNative(text)  # escapes: not worth a parser here
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                raise NotNative(text)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    last = text[start:]
    if last.strip():
        items.append(last)
    return items


def translate(
    exprs: Sequence[tuple[str, tuple | None]],
    args: Sequence[str],
    ns: Mapping[str, Any],
    module_dicts: Mapping[str, Container[str]],
    build: Callable[[int, list, list], Any],
) -> tuple[Any, list[bool]] | None:
    """The program for the guards ``exprs`` (``(expr, tensor spec or None)``, in the guard
    function's order) and which of them it checks; None where it checks none.
    ``build``: the C++ module's ``guard_program``."""
    builder = ProgramBuilder(args, ns, module_dicts)
    native = [builder.add(expr, tensor) for expr, tensor in exprs]
    if not builder.checks:
        return None
    return build(len(builder.args), builder.nodes, builder.checks), native
