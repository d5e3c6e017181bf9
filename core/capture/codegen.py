"""The transformed frame, generated as Python source you can read.

``FrameCodegen`` turns trackers back into Python expressions
(``reconstruct``): tensors the graph computed become ``___o[i]`` (and graph
outputs), values with a source are read through it, new containers are
rebuilt literally. The transformed function then is::

    def ___transformed(___fn, L_x, ...):
        ___o = ___graph(L_x, L_self._parameters['weight'], ...)  # lifted inputs
        ___t0 = <every value needed, read before anything is mutated>
        <side effects replayed in program order>
        return ___t0            # or: the eager middle and a resume call

``TORCHKILN_LOGS=bytecode`` prints it.
"""

from __future__ import annotations

import collections
import math
from typing import Any

import torch

from torchkiln.capture import runtime
from torchkiln.capture import variables as V
from torchkiln.capture.guards import GuardSet, access_prefixes, hoist
from torchkiln.capture.output_graph import OutputGraph
from torchkiln.exc import Unsupported

_LITERAL_TYPES = (int, str, bool, type(None), bytes)

#: Mutable objects: rebuilt once per entry, whatever refers to them (``reconstruct``).
_BUILT_ONCE = (
    V.FrameModuleVariable,
    V.ListVariable,
    V.DictVariable,
    V.SetVariable,
    V.DequeVariable,
    V.UserObjectVariable,
    V.IteratorVariable,
    V.NestedFunctionVariable,
)


class FrameCodegen:
    """Collects graph outputs and Python statements for one transformed function."""

    def __init__(self, output: OutputGraph, guards: GuardSet, rebuilds_functions: bool = True):
        self.output = output
        self.guards = guards
        #: False where values go on to a resume function: a function the frame made would be a
        #: new object on every call, which the resume function's identity guard never passes.
        self.rebuilds_functions = rebuilds_functions
        self.graph_outputs: list[torch.fx.Node] = []
        self._output_index: dict[torch.fx.Node, int] = {}
        self.assignments: list[str] = []
        self.statements: list[str] = []
        self._built: dict[int, tuple[V.VariableTracker, str]] = {}

    def bind(self, value: Any, hint: str = "c") -> str:
        return self.guards.bind(value, hint)

    def temp(self, expr: str) -> str:
        """Evaluate ``expr`` now, before any side effect runs; returns the temporary's name."""
        name = f"___t{len(self.assignments)}"
        self.assignments.append(f"{name} = {expr}")
        return name

    def graph_output(self, node: torch.fx.Node) -> str:
        if node not in self._output_index:
            self._output_index[node] = len(self.graph_outputs)
            self.graph_outputs.append(node)
        return f"___o[{self._output_index[node]}]"

    def reconstruct(self, vt: V.VariableTracker) -> str:
        """A Python expression that evaluates to the real value ``vt`` stands for.

        A mutable object the frame created is built once, into a temporary, so that every
        reference to it (a local, a call's argument, the return value) is one object, as in
        the frame: ``random.shuffle(lst)`` at a graph break shuffles the list the rest reads.
        """
        if isinstance(vt, _BUILT_ONCE) and vt.source is None:
            if id(vt) not in self._built:
                self._built[id(vt)] = (vt, self.temp(self._build(vt)))
            return self._built[id(vt)][1]
        return self._build(vt)

    def _build(self, vt: V.VariableTracker) -> str:
        if isinstance(vt, V.TensorVariable):
            if vt.node.op == "placeholder":
                return vt.source
            return self.graph_output(vt.node)
        if isinstance(vt, V.ConstantVariable):
            return self.constant(vt.value)
        if vt.source is not None and not isinstance(vt, (V.IteratorVariable,)):
            return vt.source
        if isinstance(vt, (V.ListVariable, V.TupleVariable, V.DictVariable, V.SetVariable)):
            return self.literal(vt)
        if isinstance(vt, V.FrameModuleVariable):
            return vt.reconstruct(self)  # a new one, as each call of the frame makes
        if isinstance(vt, V.NNModuleVariable) and vt.attrs:
            # a slice of a Sequential: its members are the calling instance's, not these
            raise Unsupported(f"cannot rebuild a slice of a {vt.describe()} after the graph")
        if isinstance(vt, V.ValueVariable) and vt.value is not None:
            return self.bind(vt.value)
        if isinstance(vt, V.SliceVariable):
            return f"slice({', '.join(self.reconstruct(p) for p in vt.parts)})"
        return vt.reconstruct(self)

    def literal(self, vt: V.VariableTracker) -> str:
        """A fresh container with ``vt``'s current items (ignores its source)."""
        if isinstance(vt, V.ListVariable):
            return f"[{', '.join(self.reconstruct(i) for i in vt.items)}]"
        if isinstance(vt, V.TupleVariable):
            items = ", ".join(self.reconstruct(i) for i in vt.items)
            if vt.cls is tuple:
                return f"({items}{',' if len(vt.items) == 1 else ''})"
            cls = self.bind(vt.cls, "cls")
            if hasattr(vt.cls, "_fields"):
                return f"{cls}({items})"
            return f"{cls}(({items},))"
        if isinstance(vt, (V.DictVariable, V.DequeVariable, V.SetVariable)):
            return vt.reconstruct_literal(self)
        raise Unsupported(f"cannot rebuild {vt.describe()}")

    def constant(self, value: Any) -> str:
        if type(value) in _LITERAL_TYPES or (type(value) is float and math.isfinite(value)):
            return repr(value)
        return self.bind(value, "v")

    def side_effects(self) -> None:
        """Replay mutations of outside objects, values read before any of them runs."""
        for event in self.output.side_effects.events:
            kind = event[0]
            if kind == "container":
                vt = event[1]
                self.statements += vt.write_back(self, self.temp(self.literal(vt)))
            elif kind == "attr":
                _, obj, name, value = event
                self.statements.append(
                    f"setattr({obj.source}, {name!r}, {self.temp(self.reconstruct(value))})"
                )
            elif kind == "delattr":
                _, obj, name = event
                self.statements.append(f"delattr({obj.source}, {name!r})")
            elif kind == "cell":
                _, contents_expr, value = event
                self.statements.append(f"{contents_expr} = {self.temp(self.reconstruct(value))}")
            elif kind == "global":
                _, globals_expr, name, value = event
                self.statements.append(
                    f"{globals_expr}[{name!r}] = {self.temp(self.reconstruct(value))}"
                )

    def grad_mode_statements(self) -> list[str]:
        """Leave grad mode and autocast as the frame left them, whatever the backend did with
        the graph's switches."""
        out = self.output
        statements = []
        if out.grad_enabled != out.initial_grad_enabled:
            statements.append(
                f"{self.bind(torch._C._set_grad_enabled, 'set_grad')}({out.grad_enabled!r})"
            )
        if out.autocast != out.initial_autocast:
            statements.append(
                f"{self.bind(runtime.set_autocast, 'set_autocast')}({out.autocast!r})"
            )
        return statements

    def function_source(self, params: str, graph_args: list[str] | None, tail: list[str]) -> str:
        """The whole transformed function; ``graph_args`` None: no graph to call; ``tail`` ends it."""
        lines = [f"def ___transformed({params}):"]
        if graph_args is not None:
            lines.append(f"    ___o = ___graph({', '.join(read_once(graph_args))})")
        lines += [f"    {s}" for s in self.assignments]
        lines += [f"    {s}" for s in self.statements]
        lines += [f"    {s}" for s in tail]
        return "\n".join(lines) + "\n"


def read_once(sources: list[str]) -> list[str]:
    """``sources`` with each ``.attr`` / ``[key]`` chain that two or more of them share read
    once, into a name: a model's parameters share long module paths, and each attribute load
    on a module is slow (``nn.Module.__getattr__`` keeps CPython from specializing it).
    Only plain chains take part: arguments run left to right, so the first to read a chain
    names it, and nothing in a plain chain runs conditionally."""
    chains = [access_prefixes(source) for source in sources]
    plain = [bool(chain) and chain[-1] == source for chain, source in zip(chains, sources)]
    counts = collections.Counter(p for chain, ok in zip(chains, plain) if ok for p in chain)
    shared = {prefix for prefix, n in counts.items() if n > 1}
    names: dict[str, str] = {}
    return [hoist(s, shared, names) if ok else s for s, ok in zip(sources, plain)]
