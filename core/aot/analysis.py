"""What a graph does to its inputs, found by running it on fake tensors.

In: a torch-level ``GraphModule`` and fake inputs. Out: a :class:`GraphMeta`
saying which inputs it mutates (seen by functionalization: version counters
miss ops like batch norm's running-stat updates), which outputs alias an
input (share its storage, so the runtime must return a view of the real
input), which outputs are not tensors (returned as constants), and which
outputs require grad. Tracing and the runtime both read this record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from torchkiln.aot.fake import (
    fresh_copies,
    functionalized,
    non_leaf_copy,
    to_functional,
    untraced,
)
from torchkiln.aot.sizes import SizeExpr, SizeReader, resolve
from torchkiln.capture.aliasing import storage_id
from torchkiln.capture.fakes import symbolic_dispatch
from torchkiln.exc import KilnError


@dataclass(frozen=True)
class OutputAlias:
    """Output ``index`` is a view of input ``base`` with this layout (each part a ``SizeExpr``
    of the call's arguments where the inputs have symbolic sizes). ``storage_offset`` counts
    from where the base starts: a call's input may start elsewhere in its storage than the
    traced one did (``base[5:].diagonal()`` views the storage from 5 on)."""

    index: int
    base: int
    size: tuple[int, ...] | SizeExpr
    stride: tuple[int, ...] | SizeExpr
    storage_offset: int | SizeExpr
    is_base_itself: bool
    #: The graph detached it (its base required grad, the view does not): rebuilt detached.
    #: Otherwise it is rebuilt from the base as it is now, so it requires grad exactly when
    #: eager's view would (views keep it even under no_grad and inference mode).
    detached: bool
    #: Rebuilds it from the base by the view ops that made it, where ``as_strided`` would
    #: not do: on a base whose elements share memory (``expand``) that requires grad,
    #: ``as_strided``'s backward sums the gradient over the shared elements where eager's
    #: views route it. Held in memory only: a plan with one is not stored on disk.
    replay: ViewReplay | None = None


@dataclass(frozen=True)
class SharedOutputs:
    """Computed outputs that are views of one intermediate tensor (``y, y.view(-1), y[0]``).

    A backend may return them as separate tensors; the runtime makes them views of one
    buffer of ``numel`` elements again, so that a write through one shows in the others.
    ``members`` holds ``(output index, size, stride, storage offset)`` (``SizeExpr`` where
    symbolic, as ``numel``).
    """

    numel: int | SizeExpr
    members: tuple[tuple[int, Any, Any, Any], ...]


@dataclass(frozen=True)
class GraphMeta:
    """How the graph's inputs and outputs relate (see module docstring).

    ``computed_outputs`` are the output positions the compiled graph
    produces (tensors that alias no input), in order. The compiled forward
    returns the new values of ``mutated_inputs`` first, then the computed
    outputs; ``fw_output_specs`` gives their sizes, dtypes and devices.
    ``mutated_requires_grad`` says whether a mutated input requires grad
    after the call (``buf.add_(w)`` makes it so), ``..._before`` before it.
    """

    num_inputs: int
    num_outputs: int
    mutated_inputs: tuple[int, ...]
    mutated_requires_grad: tuple[bool, ...]
    mutated_required_grad_before: tuple[bool, ...]
    aliases: tuple[OutputAlias, ...]
    constants: dict[int, object]
    computed_outputs: tuple[int, ...]
    computed_requires_grad: tuple[bool, ...]
    output_container: type | None
    fw_output_specs: tuple[tuple[torch.Size, torch.dtype, torch.device], ...]
    shared_outputs: tuple[SharedOutputs, ...] = ()


def _mutated_inputs(gm: torch.fx.GraphModule, fake_inputs: list, mode: FakeTensorMode) -> list[int]:
    mutated = []
    copies = fresh_copies(fake_inputs, mode)
    with mode, functionalized(), untraced(mode):
        f_args = [to_functional(a) for a in copies]
        gm.forward(*f_args)  # not gm(...): that runs the user's global module hooks
        for i, f in enumerate(f_args):
            if not isinstance(f, torch.Tensor):
                continue
            torch._sync(f)
            if torch._functionalize_has_metadata_mutation(f.elem):
                raise KilnError(
                    f"graph input {i} has its size or stride changed in place (resize_, t_, ...); "
                    "the AOT-autograd layer only supports data mutations of inputs"
                )
            if torch._functionalize_has_data_mutation(f.elem):
                mutated.append(i)
    return mutated


def _shares_memory(fake_inputs: list) -> bool:
    tensors = [t for t in fake_inputs if isinstance(t, torch.Tensor)]
    return len({storage_id(t) for t in tensors}) < len(tensors)


class ViewReplay:
    """The view ops that made a traced output from its base, run on a call's base, their
    symbolic arguments (``x[1:]``'s end: ``s0``) read off the call's arguments."""

    def __init__(self, view_func: Callable, sizes: SizeReader):
        self.view_func = view_func
        self.sizes = sizes

    def __call__(self, base: torch.Tensor, args: Sequence) -> torch.Tensor:
        return self.view_func(
            base, symint_visitor_fn=lambda s: resolve(self.sizes.concrete(s), args)
        )


def _view_replay(
    out: torch.Tensor, base: torch.Tensor, requires_grad: bool, sizes: SizeReader
) -> ViewReplay | None:
    """``out``'s view ops, where its base needs them (see ``OutputAlias.replay``)."""
    overlaps = any(st == 0 and n > 1 for st, n in zip(base.stride(), base.shape))
    if requires_grad and overlaps and out._is_view() and out is not base:
        return ViewReplay(out._view_func_unsafe, sizes)
    return None


def _views_keep_grad() -> contextlib.AbstractContextManager:
    """Under inference mode, as no_grad: eager's views of inputs that require grad keep it
    there (a view of a normal tensor made in inference mode), fake tensors' did not."""
    if not torch.is_inference_mode_enabled():
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode(False))
    stack.enter_context(torch.no_grad())
    return stack


def analyze(gm: torch.fx.GraphModule, fake_inputs: list, fake_mode: FakeTensorMode) -> GraphMeta:
    """Run ``gm`` on copies of ``fake_inputs`` (left untouched): functionally, then plainly."""
    mutated = _mutated_inputs(gm, fake_inputs, fake_mode)
    if mutated and _shares_memory(fake_inputs):
        raise KilnError(
            "the graph mutates an input while two inputs share memory (one is a view of "
            "the other); the AOT-autograd layer does not support mutations of aliased inputs"
        )
    copies = fresh_copies(fake_inputs, fake_mode)
    for i in mutated:  # the caller's, written in place, is no leaf (eager refuses a leaf)
        if copies[i].requires_grad:
            copies[i] = non_leaf_copy(copies[i], fake_mode)
    tensor_inputs = {i: t for i, t in enumerate(copies) if isinstance(t, torch.Tensor)}
    required_grad = {i: t.requires_grad for i, t in tensor_inputs.items()}
    with fake_mode, symbolic_dispatch(fake_mode), untraced(fake_mode), _views_keep_grad():
        result = gm.forward(*copies)
    output_container = type(result) if isinstance(result, (tuple, list)) else None
    outputs = [result] if output_container is None else list(result)

    storage_of_input = {storage_id(t): i for i, t in tensor_inputs.items()}
    sizes = SizeReader(fake_inputs)
    aliases, constants, computed = [], {}, []
    for index, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            constants[index] = out
            continue
        base = storage_of_input.get(storage_id(out))
        if base is None:
            computed.append(index)
            continue
        aliases.append(
            OutputAlias(
                index=index,
                base=base,
                size=sizes.concrete(tuple(out.size())),
                stride=sizes.concrete(tuple(out.stride())),
                storage_offset=sizes.concrete(
                    out.storage_offset() - tensor_inputs[base].storage_offset()
                ),
                is_base_itself=out is tensor_inputs[base],
                detached=required_grad[base] and not out.requires_grad,
                replay=_view_replay(out, tensor_inputs[base], required_grad[base], sizes),
            )
        )
    return GraphMeta(
        num_inputs=len(fake_inputs),
        num_outputs=len(outputs),
        mutated_inputs=tuple(mutated),
        mutated_requires_grad=tuple(tensor_inputs[i].requires_grad for i in mutated),
        mutated_required_grad_before=tuple(required_grad[i] for i in mutated),
        aliases=tuple(aliases),
        constants=constants,
        computed_outputs=tuple(computed),
        computed_requires_grad=tuple(outputs[i].requires_grad for i in computed),
        output_container=output_container,
        fw_output_specs=tuple(
            (t.size(), t.dtype, t.device)
            for t in [tensor_inputs[i] for i in mutated] + [outputs[i] for i in computed]
        ),
        shared_outputs=_shared_outputs(outputs, computed, sizes),
    )


def _shared_outputs(
    outputs: list, computed: list[int], sizes: SizeReader
) -> tuple[SharedOutputs, ...]:
    by_storage: dict[int, list[int]] = {}
    for index in computed:
        by_storage.setdefault(storage_id(outputs[index]), []).append(index)
    groups = []
    for indices in by_storage.values():
        tensors = [outputs[i] for i in indices]
        if len(indices) < 2 or len({t.dtype for t in tensors}) > 1:
            continue  # views of another dtype (``view(dtype)``) are left as they are
        members = tuple(
            (i, *map(sizes.concrete, (tuple(t.size()), tuple(t.stride()), t.storage_offset())))
            for i, t in zip(indices, tensors)
        )
        numel = sizes.concrete(tensors[0].untyped_storage().nbytes() // tensors[0].element_size())
        groups.append(SharedOutputs(numel, members))
    return tuple(groups)
