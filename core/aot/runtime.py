"""The runtime: run compiled forward/backward graphs as one autograd node.

:class:`TrainingPlan` holds a compiled forward, the uncompiled backward
graph and its compiler; the backward is compiled on the first backward
call and cached. :class:`CompiledFunction` is the ``torch.autograd.Function``
that runs them. :func:`finish_call` turns the compiled graph's outputs back
into what the user's graph returns: it writes mutated inputs' new values
into the real inputs, rebuilds outputs that alias inputs as views of them,
and puts non-tensor outputs back in place.

Random ops run in the forward only (the partitioners never recompute them)
and draw from the global generator in the same order as eager, so a
fixed seed gives eager's masks; backward reads the saved result.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.fx as fx
from torch._prims_common import make_contiguous_strides_for
from torch._subclasses.fake_tensor import FakeTensor

from torchkiln import counters, logs
from torchkiln.aot.analysis import GraphMeta, SharedOutputs
from torchkiln.aot.fake import compiled_beneath_user_modes, is_symbolic
from torchkiln.aot.sizes import resolve
from torchkiln.capture.dispatch import compile_lock
from torchkiln.exc import NeedsStaticShapes
from torchkiln.static_shapes import PerSizeCompiled

log = logging.getLogger("torchkiln")

Compiler = Callable[[fx.GraphModule, list], Callable]


class StartedCompile(Protocol):
    """A compile whose code is generated and whose slow part (building kernels) goes on in
    the background: what a staged compiler's ``start(gm, example_inputs)`` returns."""

    #: per output of ``gm``: the strides the compiled graph will give it (None: not known)
    output_strides: Sequence[tuple[int, ...] | None]

    def finish(self) -> Callable:
        """The compiled graph, once its kernels are built (raises the compile's error)."""
        ...


@dataclass
class BackwardAhead:
    """A backward compiled together with the forward, for the layouts the forward's compiler
    said its saved values would have (``StartedCompile.output_strides``): so that building
    the backward's kernels overlaps building the forward's. The first backward uses it if
    its arguments have ``layouts``; else it compiles the backward for them as usual."""

    compiled: Callable
    layouts: list


def example_inputs_of(gm: fx.GraphModule) -> list:
    """The fake values recorded on ``gm``'s placeholders."""
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


@dataclass
class TrainingPlan:
    """Everything one training call needs; shared by all calls of a compiled graph.

    A plan loaded from the plan cache comes with its ``compiled_backward``
    and no graph; a fresh one compiles ``backward_graph`` on first use and
    then calls ``on_backward_compiled(plan)`` (which stores the whole plan).
    """

    meta: GraphMeta
    forward: Callable
    backward_graph: fx.GraphModule | None
    backward_compiler: Compiler | None
    num_fwd_outputs: int
    differentiable: tuple[int, ...]
    grad_inputs: tuple[int, ...]
    compiled_backward: Callable | None = field(default=None, repr=False)
    on_backward_compiled: Callable[[TrainingPlan], None] | None = field(default=None, repr=False)
    #: The compiled model's runtime wrappers (``torchkiln.runtime_wrappers.AppliedWrappers``).
    wrappers: Any = field(default=None, repr=False)
    runners: dict[str, Callable] = field(default_factory=dict, repr=False)
    ahead: BackwardAhead | None = field(default=None, repr=False)
    #: The forward-output positions that get no tangent (every call marks them).
    non_differentiable: tuple[int, ...] = field(init=False, repr=False)
    #: The forward-output positions of the computed outputs that share storage with no other
    #: output: one of them that is a view is handed out as no view (``_not_a_view``).
    lone_outputs: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        differentiable = set(self.differentiable)
        self.non_differentiable = tuple(
            k for k in range(self.num_fwd_outputs) if k not in differentiable
        )
        shared = {index for group in self.meta.shared_outputs for index, *_ in group.members}
        first = len(self.meta.mutated_inputs)
        self.lone_outputs = tuple(
            first + k for k, index in enumerate(self.meta.computed_outputs) if index not in shared
        )

    def runner(self, kind: str, compiled: Callable) -> Callable:
        """``compiled`` (the forward or the backward) inside the runtime wrappers, built once."""
        if self.wrappers is None:
            return compiled
        runner = self.runners.get(kind)
        if runner is None:
            runner = self.runners[kind] = self.wrappers.wrap(compiled, kind)
        return runner

    def backward(self, args: Sequence[torch.Tensor]) -> Callable:
        """The compiled backward, compiled on first use for the strides of ``args``."""
        if self.compiled_backward is None:
            with compile_lock:  # threads running their first backward at once compile it once
                if self.compiled_backward is None:
                    self._compile_backward(args)
        return self.compiled_backward

    def _compile_backward(self, args: Sequence[torch.Tensor]) -> None:
        assert self.backward_graph is not None and self.backward_compiler is not None
        if logs.enabled("aot_graphs"):
            logs.artifact(
                "aot_graphs", "backward graph:\n%s", self.backward_graph.print_readable(False)
            )
        examples = [
            _with_strides_of(fake, real)
            for fake, real in zip(example_inputs_of(self.backward_graph), args)
        ]
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead.layouts == layouts_of(examples):
            self.compiled_backward = ahead.compiled
        else:
            if ahead is not None:
                counters["aot"]["backward_ahead_missed"] += 1
                log.info("the saved values' layouts are not the ones the backward was compiled for")
            compiler = compiled_beneath_user_modes(self.backward_compiler)
            try:
                self.compiled_backward = compiler(self.backward_graph, examples)
            except NeedsStaticShapes as e:  # compiled lazily: no caller above knows to catch it
                log.info("the backward compiles once per concrete size: %s", e)
                self.compiled_backward = PerSizeCompiled(self.backward_graph, compiler, None)
        if self.on_backward_compiled is not None:
            self.on_backward_compiled(self)


def _with_strides_of(fake: Any, real: Any) -> Any:
    """``fake`` restrided like ``real``: the forward's compiler chose the layouts of the
    saved values (traced ones are eager's), and a backward compiled for other strides
    would copy every saved value on every call."""
    if not isinstance(real, torch.Tensor):
        return fake
    return restrided(fake, real.shape, real.stride())


def restrided(fake: Any, shape: Sequence[int], stride: Sequence[int]) -> Any:
    """``fake`` with ``stride`` if it has ``shape`` and ``stride`` is a dense layout of it;
    overlapping or gapped layouts, and symbolic sizes, stay as traced."""
    if (
        not isinstance(fake, FakeTensor)
        or is_symbolic(fake)  # comparing its sizes with real ones would add shape guards
        or fake.shape != shape
        or fake.stride() == tuple(stride)
        or not _dense(shape, stride)
    ):
        return fake
    with fake.fake_mode:
        return torch.empty_strided(shape, stride, dtype=fake.dtype, device=fake.device)


def backward_examples_ahead(
    backward_graph: fx.GraphModule, saved_strides: Sequence[tuple[int, ...] | None]
) -> list:
    """The backward's example inputs as its first call will give them, before any call: the
    saved values with the strides the forward's compiler announced (``saved_strides``, None
    where it did not say), the tangents contiguous (``CompiledFunction.backward`` makes
    them so)."""
    examples = example_inputs_of(backward_graph)
    strides = [
        *saved_strides,
        *(
            make_contiguous_strides_for(x.shape) if isinstance(x, torch.Tensor) else None
            for x in examples[len(saved_strides) :]
        ),
    ]
    return [x if s is None else restrided(x, x.shape, s) for x, s in zip(examples, strides)]


def layouts_of(examples: Sequence) -> list:
    """Each example's (shape, strides), None for one that is not a tensor."""
    return [(tuple(e.shape), e.stride()) if isinstance(e, torch.Tensor) else None for e in examples]


def _dense(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether a tensor of ``shape`` and ``stride`` fills its storage span exactly once (a
    permuted contiguous layout)."""
    expected = 1
    for dim in sorted(range(len(shape)), key=lambda d: stride[d]):
        if shape[dim] != 1:
            if stride[dim] != expected:
                return False
            expected *= shape[dim]
    return True


_DOUBLE_BACKWARD = (
    b"double backward (torch.autograd.grad(..., create_graph=True) followed by another "
    b"backward) through a graph compiled with torchkiln's AOT autograd is not supported; "
    b"compute the second-order gradient eagerly or with backend='eager'"
)


def _error_on_double_backward(grads: list) -> list:
    """Make differentiating the gradients again raise a clear error."""
    tensors = [g for g in grads if isinstance(g, torch.Tensor)]
    if not tensors:
        return grads
    err = torch._C._functions.DelayedError(_DOUBLE_BACKWARD, len(tensors))
    result = err(*[g.detach().requires_grad_(True) for g in tensors])
    wrapped = iter((result,) if isinstance(result, torch.Tensor) else result)
    return [next(wrapped) if isinstance(g, torch.Tensor) else g for g in grads]


class CompiledFunction(torch.autograd.Function):
    """One autograd node for a whole compiled graph."""

    @staticmethod
    def forward(ctx: Any, plan: TrainingPlan, *args: torch.Tensor) -> tuple:
        outputs = plan.runner("forward", plan.forward)(*args)
        fw_outs, saved = outputs[: plan.num_fwd_outputs], outputs[plan.num_fwd_outputs :]
        fw_outs = list(fw_outs)
        for k in plan.lone_outputs:
            fw_outs[k] = _not_a_view(fw_outs[k])
        if plan.meta.mutated_inputs:
            mutated = {id(args[i]) for i in plan.meta.mutated_inputs}
            saved = [s.clone() if id(s) in mutated else s for s in saved]
        ctx.plan = plan
        ctx.num_args = len(args)
        # symbolic sizes the backward needs come out as ints: kept beside the tensors
        ctx.save_for_backward(*[s for s in saved if isinstance(s, torch.Tensor)])
        ctx.saved_sizes = [(i, s) for i, s in enumerate(saved) if not isinstance(s, torch.Tensor)]
        if plan.non_differentiable:
            ctx.mark_non_differentiable(*[fw_outs[k] for k in plan.non_differentiable])
        # no zeros for the outputs the backward takes no tangent of (a ResNet's 60 batch-norm
        # buffers: 60 fill kernels a step); a differentiable one the loss did not use gets
        # its zeros in ``backward``
        ctx.set_materialize_grads(False)
        ctx.tangent_meta = [
            (fw_outs[k].shape, fw_outs[k].dtype, fw_outs[k].device) for k in plan.differentiable
        ]
        return tuple(fw_outs)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple:
        plan: TrainingPlan = ctx.plan
        tangents = [
            torch.zeros(shape, dtype=dtype, device=device) if grad is None else grad.contiguous()
            for grad, (shape, dtype, device) in zip(
                (grad_outputs[k] for k in plan.differentiable), ctx.tangent_meta
            )
        ]
        args = list(ctx.saved_tensors)
        for i, size in ctx.saved_sizes:
            args.insert(i, size)
        double_backward = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in (*args, *grad_outputs)
        )
        args += tangents
        del tangents, grad_outputs
        ctx.maybe_clear_saved_tensors()  # unless retain_graph: ``args`` holds the only references
        with torch.no_grad():
            got = _call_backward(plan.runner("backward", plan.backward(args)), args)
        grads: list = [None] * ctx.num_args
        for i, g in zip(plan.grad_inputs, got):
            grads[i] = g
        if double_backward:
            grads = _error_on_double_backward(grads)
        return (None, *grads)


def _not_a_view(out: Any) -> Any:
    """``out``, or where it is a view (of an intermediate: outputs aliasing inputs are made
    outside), a tensor sharing its memory that autograd takes for no view. A view made inside
    a custom ``Function`` may not be written in place (``y[mask] = 0`` after the call fails);
    eager's output is a view of a tensor no one else can reach, which may. The memory's
    version counter stays shared, so a write to a value the backward saved still fails in
    the backward, as in eager."""
    return out.detach() if isinstance(out, torch.Tensor) and out._is_view() else out


def _call_backward(compiled: Callable, args: list) -> Sequence:
    """Run the compiled backward, handing it ``args`` to free as it goes where it can."""
    call_boxed = getattr(compiled, "call_boxed", None)
    if call_boxed is not None:
        return call_boxed(args)
    return compiled(*args)


def run_training(plan: TrainingPlan, args: Sequence) -> list:
    """Forward outputs (mutated inputs' values, then computed outputs), tracked by autograd."""
    return list(CompiledFunction.apply(plan, *args))


def _share_storage(outputs: list, group: SharedOutputs, args: Sequence) -> None:
    """Make the outputs of ``group`` views of one buffer again (see ``SharedOutputs``).

    Views that a backend returned are left as they are, unless autograd tracks them: a view
    made inside ``CompiledFunction`` cannot be written in place (autograd forbids it, a custom
    backward being in the way), so those are made again outside it, of the member that is
    the buffer itself (torch's AOT autograd regenerates such views the same way).
    """
    tensors = [outputs[index] for index, *_ in group.members]
    if len({t.untyped_storage()._cdata for t in tensors}) == 1:
        base = next((t for t in tensors if not t._is_view()), None)
        if base is None or not any(t.requires_grad for t in tensors):
            return
        for (index, *layout), value in zip(group.members, tensors):
            if value is not base:
                outputs[index] = base.as_strided(*(resolve(v, args) for v in layout))
        return
    base = tensors[0].new_empty(resolve(group.numel, args))
    for (index, *layout), value in zip(group.members, tensors):
        view = base.as_strided(*(resolve(v, args) for v in layout))
        view.copy_(value)  # recorded by autograd when ``value`` requires grad
        outputs[index] = view


#: ``finish_call`` bound to one graph's meta: ``(args, fw_outs) -> the call's result``.
OutputBuilder = Callable[[Sequence, Sequence], Any]


def output_builder(meta: GraphMeta) -> OutputBuilder:
    """``finish_call`` for ``meta``, chosen once per plan rather than worked out on every call.

    A graph that mutates no input and returns only computed tensors, in order, needs
    nothing but its container rebuilt around the compiled graph's outputs.
    """
    if (
        meta.mutated_inputs
        or meta.aliases
        or meta.constants
        or meta.shared_outputs
        or meta.computed_outputs != tuple(range(meta.num_outputs))
    ):
        return functools.partial(finish_call, meta)
    container = meta.output_container
    if container is None:
        return _first_output
    if hasattr(container, "_fields"):  # a namedtuple
        return lambda args, fw_outs: container(*fw_outs)
    return lambda args, fw_outs: container(fw_outs)


def _first_output(args: Sequence, fw_outs: Sequence) -> Any:
    return fw_outs[0]


def apply_mutations(meta: GraphMeta, args: Sequence, new_values: Sequence) -> None:
    """Write the graph's new values into the inputs it mutated.

    Where autograd records none of the copies (batch norms' running statistics), they go
    in one ``_foreach_copy_`` per dtype: two launches on a GPU for a ResNet's 60 buffers. The
    mutated inputs share no memory (the capture guards that and hands aliases in as one
    base), so copying them together is copying them one after another, unless a new value
    is itself one of the inputs written.
    """
    targets = [args[i] for i in meta.mutated_inputs]
    grad = torch.is_grad_enabled()
    if (
        len(targets) > 1
        and not (grad and any(new.requires_grad for new in new_values))
        and not {id(t) for t in targets} & {id(new) for new in new_values}
    ):
        # by dtype: ``_foreach_copy_`` of mixed dtypes copies tensor by tensor (a launch each)
        groups: dict[tuple, tuple[list, list]] = {}
        for target, new in zip(targets, new_values):
            group = groups.setdefault((target.dtype, new.dtype, target.device), ([], []))
            group[0].append(target)
            group[1].append(new)
        with torch.no_grad():
            for group_targets, group_values in groups.values():
                torch._foreach_copy_(group_targets, group_values)
        return
    for target, new in zip(targets, new_values):
        with torch.set_grad_enabled(new.requires_grad and grad):
            target.copy_(new)  # recorded by autograd when the new value requires grad


def finish_call(meta: GraphMeta, args: Sequence, fw_outs: Sequence) -> Any:
    """Apply input mutations, rebuild aliased and constant outputs, shape the result."""
    num_mutated = len(meta.mutated_inputs)
    if num_mutated:
        apply_mutations(meta, args, fw_outs[:num_mutated])
    outputs: list = [None] * meta.num_outputs
    for index, value in zip(meta.computed_outputs, fw_outs[num_mutated:]):
        outputs[index] = value
    for group in meta.shared_outputs:
        _share_storage(outputs, group, args)
    for index, value in meta.constants.items():
        outputs[index] = value
    for alias in meta.aliases:
        base = args[alias.base]
        if alias.is_base_itself:
            outputs[alias.index] = base
            continue
        if alias.detached:
            base = base.detach()
        if alias.replay is not None:
            outputs[alias.index] = alias.replay(base, args)
            continue
        layout = (alias.size, alias.stride, alias.storage_offset)
        size, stride, offset = (resolve(v, args) for v in layout)
        outputs[alias.index] = base.as_strided(size, stride, base.storage_offset() + offset)
    if meta.output_container is None:
        return outputs[0]
    if hasattr(meta.output_container, "_fields"):
        return meta.output_container(*outputs)
    return meta.output_container(outputs)
