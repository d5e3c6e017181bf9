"""Run an AOT graph with torch.fx, freeing each input after its last use.

A backward graph's inputs are the activations the forward saved. Called as
``gm(*args)``, the caller's argument tuple keeps every one of them alive until the
whole backward returns, so its peak memory holds all saved activations at once;
eager's autograd frees each as soon as its node has run. ``run_boxed(gm)`` gives the
runtime a ``call_boxed(args)`` (see :mod:`torchkiln.aot`): the generated code moves
the inputs out of the list, empties it, and torch.fx's code already drops each value
(inputs included) after its last use.

The generated code calls each aten overload's C op (``OpOverload._op``) bound as a global,
not ``torch.ops.aten.mm.default(...)`` as torch.fx writes it: that spells four attribute
lookups and a Python frame (``OpOverload.__call__``, which only calls ``_op``) per op, about
0.7 us of a 2.7 us call on the CPU VM, and a backward graph runs hundreds of ops a step.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.fx as fx

OpOverload = torch._ops.OpOverload


class _BoxedCodeGen(fx.graph.CodeGen):
    """``forward(self, args)``: the placeholders taken from ``args``, which is then emptied;
    aten overloads called through their C ops."""

    def gen_fn_def(self, free_vars: list[str], maybe_return_annotation: str, **kwargs: Any) -> str:
        names = [v.split(":")[0].split("=")[0].strip() for v in free_vars if v != "self"]
        lines = [f"def {self._func_name}(self, args){maybe_return_annotation}:"]
        if names:
            lines.append(f"    {', '.join(names)}, = args")
            lines.append("    args.clear()")
        return "\n".join(lines)

    def _gen_python_code(self, nodes, *args: Any, **kwargs: Any) -> fx.graph.PythonCode:
        code = super()._gen_python_code(nodes, *args, **kwargs)
        overloads = {
            n.target for n in nodes if n.op == "call_function" and type(n.target) is OpOverload
        }
        for k, overload in enumerate(sorted(overloads, key=str)):
            name = f"_op{k}_" + re.sub(r"\W", "_", str(overload))
            # ``torch.ops.aten.mm.default(`` is how torch.fx calls the overload; the name
            # followed by "(" appears nowhere else in the source
            code.src = code.src.replace(f"torch.ops.{overload}(", f"{name}(")
            code.globals[name] = overload._op
        return code


class BoxedGraph:
    """A graph's compiled callable: ``call_boxed(args)`` empties ``args`` and frees each
    input after its last use; ``graph(*args)`` is the same without the caller's list."""

    def __init__(self, gm: fx.GraphModule):
        graph = fx.Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        graph.set_codegen(_BoxedCodeGen())
        self._module = fx.GraphModule(gm, graph)

    def __call__(self, *args: Any) -> Any:
        return self._module.forward(list(args))

    def call_boxed(self, args: list) -> Any:
        return self._module.forward(args)


def run_boxed(gm: fx.GraphModule, example_inputs: list) -> BoxedGraph:
    """A graph compiler that compiles nothing: the graph runs as it is, boxed."""
    return BoxedGraph(gm)
