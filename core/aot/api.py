"""``aot_autograd``: turn graph compilers into a backend that compiles training too.

The returned compile function analyses the graph on fake tensors, then per
call picks a *plan*: an inference graph when grad mode is off or no input
requires grad, else a joint graph split by the partitioner into forward and
backward. Plans are built lazily and cached per requires_grad pattern of
the inputs and per value of the non-tensor inputs (tracing bakes those in);
the plan matching ``example_inputs`` is built at compile time.

With symbolic sizes, tracing a plan can add facts to the capture's ShapeEnv (a
decomposition asks ``s0 - 1 != 1``). The plan built at compile time adds them before the
capture turns the ShapeEnv into guards; a plan built later checks its new facts on every
call, and a call that breaks one runs a plan traced for its concrete sizes. With a
``cache`` codec, plans are also looked up in and stored to the on-disk plan
cache (:mod:`torchkiln.aot.cache`), so another process skips the tracing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
)

from torchkiln import logs, runtime_wrappers
from torchkiln.aot.analysis import GraphMeta, analyze
from torchkiln.aot.cache import ArtifactCodec, PlanCache
from torchkiln.aot.decompositions import keep_whole
from torchkiln.aot.fake import fake_mode_and_inputs, is_symbolic, user_modes_suspended
from torchkiln.aot.partition import min_cut_partition
from torchkiln.aot.runtime import (
    BackwardAhead,
    Compiler,
    OutputBuilder,
    TrainingPlan,
    backward_examples_ahead,
    example_inputs_of,
    layouts_of,
    output_builder,
    run_training,
)
from torchkiln.aot.sizes import SizeReader
from torchkiln.aot.trace import Decompositions, trace_inference, trace_joint
from torchkiln.capture.dispatch import compile_lock
from torchkiln.saved_hooks import paused_saved_tensors_hooks
from torchkiln.static_shapes import (
    PerSizeCompiled,
    has_symbolic_inputs,
    has_symbolic_values,
    size_key,
)

#: Whether a call's argument sizes keep the facts a plan was traced under.
SizeCheck = Callable[[Sequence], bool]
Partitioner = Callable[[fx.GraphModule, int], tuple[fx.GraphModule, fx.GraphModule]]
#: ``graph_pass(gm, fake_inputs) -> gm``: a rewrite of the captured graph before tracing.
GraphPass = Callable[[fx.GraphModule, list], fx.GraphModule]

Tensor = torch.Tensor  # read per argument per call: a global, not ``torch.Tensor``


#: The plan of a graph that runs as captured, uncompiled: its joint trace met a size or value
#: that depends on the data (a boolean mask's gradient, ``grad[mask]``), which the static
#: forward did not show to the capture, so no graph break is there to take it
RUN_AS_CAPTURED = "run as captured"


def _log_graph(title: str, gm: fx.GraphModule) -> None:
    if logs.enabled("aot_graphs"):
        logs.artifact("aot_graphs", "%s:\n%s", title, gm.print_readable(False))


def _plan_key(args: Sequence, grad_enabled: bool) -> tuple[tuple[bool, ...] | None, tuple]:
    """Which plan a call needs: its requires_grad pattern (None: inference) and
    its non-tensor arguments, which tracing bakes into the graph.

    Computed on every call: a plain loop for the common all-tensor case (a comprehension
    is a function object and a frame of its own), and the pattern only under grad mode.
    """
    constants = ()
    for a in args:
        if not isinstance(a, Tensor):
            constants = tuple([a for a in args if not isinstance(a, Tensor)])
            break
    if grad_enabled:
        pattern = tuple([isinstance(a, Tensor) and a.requires_grad for a in args])
        if True in pattern:
            return pattern, constants
    return None, constants


def _guards_on_data(e: Exception) -> bool:
    """Whether ``e`` is a guard on a value read from a tensor. Only symbolic sizes raise it,
    so torch's symbolic-shapes module (and sympy) is loaded then: not imported here, as a
    process that loads its plans from the cache never needs it."""
    shapes = sys.modules.get("torch.fx.experimental.symbolic_shapes")
    return shapes is not None and isinstance(e, shapes.GuardOnDataDependentSymNode)


def _any_requires_grad(args: Sequence) -> bool:
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


class _AOTCompiled:
    """The callable ``aot_autograd(...)(gm, example_inputs)`` returns."""

    def __init__(
        self,
        gm: fx.GraphModule,
        fw_compiler: Compiler,
        bw_compiler: Compiler,
        inference_compiler: Compiler,
        decompositions: Decompositions | None,
        partition_fn: Partitioner,
        cache: PlanCache | None,
        before_trace: Callable[[], None] | None = None,
        graph_pass: GraphPass | None = None,
        backward_ahead: bool = False,
    ) -> None:
        self.gm = gm
        self.fw_compiler = fw_compiler
        self.bw_compiler = bw_compiler
        self.inference_compiler = inference_compiler
        self.decompositions = decompositions
        self.partition_fn = partition_fn
        self.cache = cache
        self.before_trace = before_trace
        self.graph_pass = graph_pass
        self.backward_ahead = backward_ahead
        #: The compiled model's runtime wrappers (CUDA graphs, say), applied around each
        #: compiled forward, backward and inference graph; kept out of the plan cache.
        self.wrappers = runtime_wrappers.claim()
        #: Per plan key: the graph's meta, the plan, how a call's outputs are finished, and the
        #: size facts its trace added after the capture took its guards (None: none).
        self.plans: dict[tuple, tuple[GraphMeta, Any, OutputBuilder, SizeCheck | None]] = {}
        #: How many ShapeEnv guards the capture had turned into its guards (``seal``).
        self.sealed_guards: int | None = None
        #: Plans traced with static sizes, for calls whose sizes break a plan's facts.
        self.per_size: PerSizeCompiled | None = None
        self.enables_grad = any(
            node.target is torch._C._set_grad_enabled and node.args[0] for node in gm.graph.nodes
        )

    def plan_for(self, args: Sequence) -> tuple[GraphMeta, Any, OutputBuilder, SizeCheck | None]:
        key = _plan_key(args, torch.is_grad_enabled())
        return self.plans.get(key) or self._new_plan(key, args)

    def seal(self) -> None:
        """Note the ShapeEnv facts known now (the capture guards them): plans built later
        check the ones their trace adds."""
        shape_env = self._shape_env()
        if shape_env is not None:
            self.sealed_guards = len(shape_env.guards)

    def _shape_env(self) -> Any:
        """The capture's ShapeEnv, where the graph's inputs have symbolic sizes; else None."""
        if not has_symbolic_inputs(self.gm):
            return None
        for node in self.gm.graph.find_nodes(op="placeholder"):
            fake = node.meta.get("example_value")
            if isinstance(fake, FakeTensor):
                return fake.fake_mode.shape_env
        return None

    def _new_plan(
        self, key: tuple, args: Sequence
    ) -> tuple[GraphMeta, Any, OutputBuilder, SizeCheck | None]:
        with compile_lock:  # built at call time, maybe by several threads at once
            if key not in self.plans:
                meta, plan = self._build(args, training=key[0] is not None)
                check = self._new_facts_check(args)
                self.plans[key] = meta, self._with_wrappers(plan), output_builder(meta), check
        return self.plans[key]

    def _new_facts_check(self, args: Sequence) -> SizeCheck | None:
        """The check of the size facts added since ``seal``, or None if there are none."""
        if self.sealed_guards is None:
            return None
        facts = [guard.expr for guard in self._shape_env().guards[self.sealed_guards :]]
        if not facts:
            return None
        _, fakes = fake_mode_and_inputs(list(args), self.gm)
        check = SizeReader(fakes).condition(facts)
        if check is None:  # a fact over sizes the arguments do not give: these sizes only
            traced = size_key(args)
            return lambda call_args: size_key(call_args) == traced
        return check

    def _run_per_size(self, args: Sequence) -> Any:
        """Run the graph through a plan traced for these concrete sizes."""
        with compile_lock:
            if self.per_size is None:
                self.per_size = PerSizeCompiled(self.gm, self._static_copy_compiled, list(args))
        return self.per_size(*args)

    def _static_copy_compiled(self, gm: fx.GraphModule, args: list) -> _AOTCompiled:
        static = _AOTCompiled(
            gm,
            self.fw_compiler,
            self.bw_compiler,
            self.inference_compiler,
            self.decompositions,
            self.partition_fn,
            self.cache,
            self.before_trace,
            self.graph_pass,
            self.backward_ahead,
        )
        static.wrappers = self.wrappers
        static.plan_for(args)
        return static

    def _with_wrappers(self, plan: Any) -> Any:
        if self.wrappers is None or plan is RUN_AS_CAPTURED:
            return plan
        if isinstance(plan, TrainingPlan):
            plan.wrappers = self.wrappers  # the backward is compiled later
            return plan
        return self.wrappers.wrap(plan, "inference")

    def _build(self, args: Sequence, training: bool) -> tuple[GraphMeta, Any]:
        # a symbolic graph's plans are kept in memory only: a stored plan is keyed by sizes
        cacheable = self.cache is not None and not has_symbolic_values(self.gm)
        key = self.cache.key(self.gm, list(args), training) if cacheable else None
        if key is not None:
            cached = self.cache.load(key)
            if cached is not None:
                return cached
        if self.before_trace is not None:
            self.before_trace()
        with paused_saved_tensors_hooks():
            meta, plan = self._trace_and_compile(args, training)
        if key is not None and plan is not RUN_AS_CAPTURED:
            if isinstance(plan, TrainingPlan):
                plan.on_backward_compiled = lambda p: self.cache.store_training(key, p)
            else:
                self.cache.store_inference(key, meta, plan)
        return meta, plan

    def _trace_and_compile(self, args: Sequence, training: bool) -> tuple[GraphMeta, Any]:
        mode, fakes = fake_mode_and_inputs(list(args), self.gm)
        gm = self.gm if self.graph_pass is None else self.graph_pass(self.gm, fakes)
        meta = analyze(gm, fakes, mode)
        # an input written with a value that requires grad needs the backward too (``h[i] = w``)
        if training and any(meta.computed_requires_grad + meta.mutated_requires_grad):
            try:
                joint = trace_joint(gm, meta, fakes, mode, self.decompositions)
            except (DynamicOutputShapeException, DataDependentOutputException) as e:
                logs.log.warning(
                    "a graph's backward needs %s, whose output depends on the data: the graph "
                    "runs as captured (uncompiled) when it computes gradients",
                    getattr(e, "func", e),
                )
                return meta, RUN_AS_CAPTURED
            except Exception as e:
                if not _guards_on_data(e):  # a custom op's backward branching on .item()
                    raise
                logs.log.warning(
                    "a graph's backward branches on a value that depends on the data (%s): the "
                    "graph runs as captured (uncompiled) when it computes gradients",
                    str(e).splitlines()[0],
                )
                return meta, RUN_AS_CAPTURED
            _log_graph("joint graph", joint.gm)
            # the user's function modes are baked into the traced graphs: none from here on
            with user_modes_suspended():
                fw_gm, bw_gm = self.partition_fn(joint.gm, joint.num_fwd_outputs)
                fw_gm.meta["num_user_outputs"] = joint.num_fwd_outputs
                _log_graph("forward graph", fw_gm)
                if self._compiles_backward_ahead(bw_gm):
                    forward, ahead = self._compile_both(fw_gm, bw_gm, joint.num_fwd_outputs)
                else:
                    forward, ahead = self.fw_compiler(fw_gm, example_inputs_of(fw_gm)), None
            return meta, TrainingPlan(
                meta=meta,
                forward=forward,
                backward_graph=bw_gm,
                backward_compiler=self.bw_compiler,
                num_fwd_outputs=joint.num_fwd_outputs,
                differentiable=joint.differentiable,
                grad_inputs=joint.grad_inputs,
                ahead=ahead,
            )
        inference_gm = trace_inference(gm, meta, fakes, mode, self.decompositions)
        _log_graph("inference graph", inference_gm)
        with user_modes_suspended():
            return meta, self.inference_compiler(inference_gm, example_inputs_of(inference_gm))

    def _compiles_backward_ahead(self, bw_gm: fx.GraphModule) -> bool:
        """Whether to compile the backward with the forward: asked for, both compilers
        staged, and static sizes (a symbolic backward may compile once per size)."""
        return (
            self.backward_ahead
            and hasattr(self.fw_compiler, "start")
            and hasattr(self.bw_compiler, "start")
            and not any(is_symbolic(x) for x in example_inputs_of(bw_gm))
        )

    def _compile_both(
        self, fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, num_fwd_outputs: int
    ) -> tuple[Callable, BackwardAhead | None]:
        """The compiled forward, and the backward compiled while the forward's kernels build,
        for the saved values' layouts the forward's compiler announced. A backward that fails
        to compile here is left to the first backward call, which reports its error."""
        started = self.fw_compiler.start(fw_gm, example_inputs_of(fw_gm))
        examples = backward_examples_ahead(bw_gm, started.output_strides[num_fwd_outputs:])
        try:
            backward = self.bw_compiler.start(bw_gm, examples)
        except Exception as e:  # compiled again, and reported, at the first backward
            logs.log.info("the backward did not compile with the forward: %s", e)
            backward = None
        forward = started.finish()
        if backward is None:
            return forward, None
        try:
            return forward, BackwardAhead(backward.finish(), layouts_of(examples))
        except Exception as e:  # as above
            logs.log.info("the backward did not compile with the forward: %s", e)
            return forward, None

    def __call__(self, *args: Any) -> Any:
        grad_enabled = torch.is_grad_enabled()
        if self.enables_grad and not grad_enabled and _any_requires_grad(args):
            # called under no_grad, the graph turns grad on for inputs that require it: plans
            # trace under one grad mode, so the captured graph runs as it is
            return self.gm.forward(*args)
        key = _plan_key(args, grad_enabled)
        _, plan, finish, check = self.plans.get(key) or self._new_plan(key, args)
        if plan is RUN_AS_CAPTURED:
            return self.gm.forward(*args)
        if check is not None and not check(args):
            return self._run_per_size(args)
        if torch._C._is_any_autocast_enabled():
            # tracing baked the casts in (and a region the graph left with autocast off):
            # autocast must not cast the plan's ops again
            with torch._C._DisableAutocast():
                return self._run(plan, finish, args, grad_enabled)
        return self._run(plan, finish, args, grad_enabled)

    def _run(self, plan: Any, finish: Any, args: Sequence, grad_enabled: bool) -> Any:
        if isinstance(plan, TrainingPlan):
            return finish(args, run_training(plan, args))
        if not grad_enabled:  # no mode to switch
            return finish(args, plan(*args))
        # ``torch.no_grad()`` as two C calls: a context manager object per call costs more
        # than the graph of a small op
        torch._C._set_grad_enabled(False)
        try:
            fw_outs = plan(*args)
        finally:
            torch._C._set_grad_enabled(grad_enabled)
        return finish(args, fw_outs)


def aot_autograd(
    fw_compiler: Compiler,
    bw_compiler: Compiler | None = None,
    inference_compiler: Compiler | None = None,
    decompositions: Decompositions | None = None,
    partition_fn: Partitioner | None = None,
    cache: ArtifactCodec | None = None,
    before_trace: Callable[[], None] | None = None,
    graph_pass: GraphPass | None = None,
    backward_ahead: bool = False,
) -> Callable[[fx.GraphModule, list], Callable]:
    """A backend compile function that traces forward and backward ahead of time.

    ``bw_compiler`` and ``inference_compiler`` default to ``fw_compiler``;
    ``partition_fn`` defaults to :func:`min_cut_partition`. See
    :mod:`torchkiln.aot` for the graphs each compiler receives. ``cache``
    (how to store the compilers' results) turns on the on-disk plan cache.
    ``before_trace`` is called when a graph is about to be traced and compiled (not when its
    plan is loaded from the cache): a backend starts there what its compilers will need, so
    that it starts while the trace runs (inductor: its Triton compile workers).
    ``graph_pass(gm, fake_inputs)`` returns the captured graph rewritten (a new module; ``gm``
    stays as captured), which is then traced; it runs when a plan is traced, not when one is
    loaded: plans are keyed by the graph as captured, so what the pass decides may depend only
    on the graph, its inputs' metadata and what the codec's salt holds (inductor: explicit
    attention into SDPA calls).
    ``decompositions`` never decompose the ops of ``torchkiln.aot.KEEP_WHOLE``.
    ``backward_ahead``: compile a training graph's backward when its forward is compiled
    rather than at the first backward, where both compilers are staged (``start(gm,
    example_inputs)`` returns a :class:`~torchkiln.aot.runtime.StartedCompile`): the
    backward's code is generated while the forward's kernels build (inductor on a GPU: both
    graphs' Triton kernels compile in the workers at once).
    """
    partition_fn = partition_fn or min_cut_partition
    if decompositions is not None:
        decompositions = keep_whole(decompositions)
    plan_cache = PlanCache(cache, decompositions, partition_fn) if cache is not None else None

    def compile_fn(gm: fx.GraphModule, example_inputs: list) -> Callable:
        compiled = _AOTCompiled(
            gm,
            fw_compiler=fw_compiler,
            bw_compiler=bw_compiler or fw_compiler,
            inference_compiler=inference_compiler or fw_compiler,
            decompositions=decompositions,
            partition_fn=partition_fn,
            cache=plan_cache,
            before_trace=before_trace,
            graph_pass=graph_pass,
            backward_ahead=backward_ahead,
        )
        compiled.plan_for(example_inputs)
        compiled.seal()
        return compiled

    return compile_fn
