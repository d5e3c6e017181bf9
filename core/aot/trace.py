"""Tracing at aten level: ``make_fx`` over fake tensors, under functionalization.

In: a torch-level graph, fake inputs and its :class:`GraphMeta`. Out: a
functional aten graph with flat placeholders and a flat tuple output:

* :func:`trace_inference`: ``primals_*`` → (new values of mutated inputs,
  computed outputs).
* :func:`trace_joint`: ``primals_*, tangents_*`` → (the same forward outputs,
  then the gradients autograd gives for the inputs that require grad).

Functionalization (``FunctionalTensorMode``) runs below autograd, so in-place
ops, including those autograd's backward formulas use, become out-of-place;
an input's final value is read back from its functional wrapper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from torchkiln.aot.analysis import GraphMeta
from torchkiln.aot.fake import (
    beneath_user_modes,
    fresh_copies,
    from_functional,
    functionalized,
    to_functional,
)
from torchkiln.aot.storage_views import read_storage_roots
from torchkiln.effects import is_impure

Decompositions = Mapping[Callable, Callable]


def _forward_outputs(gm: torch.fx.GraphModule, meta: GraphMeta, f_args: list) -> list:
    result = gm.forward(*f_args)  # not gm(...): that runs the user's global module hooks
    outputs = [result] if meta.output_container is None else list(result)
    return [f_args[i] for i in meta.mutated_inputs] + [outputs[i] for i in meta.computed_outputs]


def _flatten_io(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Plain positional placeholders and a flat tuple output, dead code removed."""
    gm.graph._codegen = torch.fx.graph.CodeGen()
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    output.args = (tuple(output.args[0]),)
    read_storage_roots(gm.graph)
    gm.graph.eliminate_dead_code(is_impure_node=is_impure)
    gm.recompile()
    return gm


def trace_inference(
    gm: torch.fx.GraphModule,
    meta: GraphMeta,
    fake_inputs: list,
    mode: FakeTensorMode,
    decompositions: Decompositions | None,
) -> torch.fx.GraphModule:
    """The forward graph of a call where nothing needs a gradient."""

    def forward(primals: list) -> list:
        with functionalized():
            f_args = [to_functional(a) for a in primals]
            outputs = _forward_outputs(gm, meta, f_args)
        return [from_functional(o) for o in outputs]

    with torch.no_grad():
        traced = make_fx(
            forward, decomposition_table=beneath_user_modes(decompositions), tracing_mode="fake"
        )(fresh_copies(fake_inputs, mode))
    inference = _flatten_io(traced)
    # the capture marks parameters and buffers; an inference graph passes on the marks of
    # those it does not write (batch norm's running statistics in training mode), for a
    # backend to fold (a training graph never: its weights change every step)
    placeholders = zip(
        gm.graph.find_nodes(op="placeholder"), inference.graph.find_nodes(op="placeholder")
    )
    for k, (source, node) in enumerate(placeholders):
        if source.meta.get("weight") and k not in meta.mutated_inputs:
            node.meta["weight"] = True
    return inference


@dataclass(frozen=True)
class JointGraph:
    """A joint graph and how its outputs map back to the call.

    ``differentiable`` are the forward-output positions that get a tangent;
    ``grad_inputs`` the input positions whose gradients the graph returns,
    in the order it returns them.
    """

    gm: torch.fx.GraphModule
    num_fwd_outputs: int
    differentiable: tuple[int, ...]
    grad_inputs: tuple[int, ...]


def trace_joint(
    gm: torch.fx.GraphModule,
    meta: GraphMeta,
    fake_inputs: list,
    mode: FakeTensorMode,
    decompositions: Decompositions | None,
) -> JointGraph:
    """Forward and backward in one graph, for a call that needs gradients."""
    primals = fresh_copies(fake_inputs, mode)
    # written in place though they require grad (the caller's are no leaves): the graph
    # writes clones, and the gradients reach the inputs through them, as in torch's AOT
    written_with_grad = {
        i for i, rg in zip(meta.mutated_inputs, meta.mutated_required_grad_before) if rg
    }
    differentiable = tuple(
        k for k, rg in enumerate(meta.mutated_requires_grad + meta.computed_requires_grad) if rg
    )
    wants_grad = [
        i for i, t in enumerate(primals) if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    with mode:
        tangents = [
            torch.empty(
                meta.fw_output_specs[k][0],
                dtype=meta.fw_output_specs[k][1],
                device=meta.fw_output_specs[k][2],
            )
            for k in differentiable
        ]
    got_grad: list[int] = []

    def joint(primals: list, tangents: list) -> list:
        with functionalized():
            f_primals = [to_functional(a) for a in primals]
            f_tangents = [to_functional(t) for t in tangents]
            f_args = [f.clone() if i in written_with_grad else f for i, f in enumerate(f_primals)]
            outputs = _forward_outputs(gm, meta, f_args)
            grads = torch.autograd.grad(
                [outputs[k] for k in differentiable],
                [f_primals[i] for i in wants_grad],
                f_tangents,
                allow_unused=True,
            )
        got_grad[:] = [i for i, g in zip(wants_grad, grads) if g is not None]
        present = [g for g in grads if g is not None]
        return [from_functional(o) for o in outputs] + [from_functional(g) for g in present]

    with torch.enable_grad():
        traced = make_fx(
            joint, decomposition_table=beneath_user_modes(decompositions), tracing_mode="fake"
        )(primals, tangents)
    return JointGraph(
        gm=_flatten_io(traced),
        num_fwd_outputs=len(meta.mutated_inputs) + len(meta.computed_outputs),
        differentiable=differentiable,
        grad_inputs=tuple(got_grad),
    )
