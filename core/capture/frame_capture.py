"""One capture: a frame and its arguments in, a cache entry out.

``capture_frame`` runs the translator over the frame's code with the call's
real arguments as the starting point, then generates the entry's guard
function and transformed function (``codegen``), and hands the graph to the
backend. Three outcomes:

- the whole frame was traced: one graph, a transformed function that calls
  it and returns;
- ``Unsupported`` at a point where the graph can be broken: the frame is
  traced again up to that point and ends in a graph break (``graph_break``);
- otherwise an *eager entry*: the frame runs uncompiled for inputs that
  pass the guards gathered so far (eager is always correct).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from torchkiln import logs
from torchkiln.capture import inference_mode, runtime
from torchkiln.capture import variables as V
from torchkiln.capture.aliasing import guard_and_merge_aliases, guard_distinct_objects
from torchkiln.capture.causal_masks import use_is_causal
from torchkiln.capture.codegen import FrameCodegen
from torchkiln.capture.fakes import FakePropagation
from torchkiln.capture.guards import GuardSet
from torchkiln.capture.output_graph import OutputGraph
from torchkiln.capture.signature import call_original_source, frame_param_names, params_text
from torchkiln.capture.translator import StopAtBreak, Translator
from torchkiln.capture.variables.functions import RealCellVariable
from torchkiln.exc import CaptureError, Unsupported
from torchkiln.saved_hooks import paused_saved_tensors_hooks


@dataclass
class CacheEntry:
    """What one capture produced; ``guard`` and ``run`` take ``(fn, *frame_locals)``."""

    guard: Callable[..., bool]
    run: Callable[..., Any]
    first_failure: Callable[..., str | None]
    guard_source: str
    code_source: str
    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    break_reasons: list[Unsupported] = field(default_factory=list)
    eager_reason: Unsupported | None = None
    guard_descriptions: list[str] = field(default_factory=list)
    #: What ``persist`` stores: the guards with their namespace, and the graph's argument sources.
    guard_set: GuardSet | None = None
    graph_args: list[str] | None = None

    def __post_init__(self) -> None:
        # a raised reason's traceback holds the translator's frames, and through them every
        # object the capture read (a dropped module): keep what it says, not where it was raised
        self.break_reasons = [Unsupported(r.reason, r.location) for r in self.break_reasons]
        if self.eager_reason is not None:
            self.eager_reason = Unsupported(self.eager_reason.reason, self.eager_reason.location)


@dataclass
class Trace:
    """The state a translation reached: finished (``return_value``) or stopped at a break."""

    translator: Translator
    output: OutputGraph
    guards: GuardSet
    return_value: V.VariableTracker | None


def translate(
    fn: types.FunctionType,
    args: tuple,
    break_step: int | None = None,
    replay: FakePropagation | None = None,
) -> Trace:
    """Run the translator over ``fn``'s code, with ``args`` as the frame's locals.

    ``replay`` is the fake propagation of an earlier translation of the same call (see
    ``fakes``); an ``Unsupported`` raised here carries this one's as ``fakes``.
    """
    code = fn.__code__
    guards = GuardSet({})
    output = OutputGraph(guards, replay)
    try:
        names = frame_param_names(code)
        f_locals = {name: output.wrap(value, local) for (name, local), value in zip(names, args)}
        closure = [
            RealCellVariable(cell, f"___fn.__closure__[{i}].cell_contents")
            for i, cell in enumerate(fn.__closure__ or ())
        ]
        tx = Translator(
            output,
            code,
            fn.__globals__,
            "___fn.__globals__",
            f_locals,
            closure,
            break_step=break_step,
        )
        try:
            return_value = tx.run()
        except StopAtBreak:
            return_value = None
        except Unsupported as e:
            if e.location is None:
                e.location = tx.location()
                e.args = (f"{e.reason} at {e.location}",)
            e.root_steps = tx.steps  # type: ignore[attr-defined]
            e.guards = guards  # type: ignore[attr-defined]
            e.fakes = output.fakes  # type: ignore[attr-defined]
            raise
    except Unsupported as e:
        if not hasattr(e, "guards"):
            e.guards = guards  # type: ignore[attr-defined]
            e.root_steps = None  # type: ignore[attr-defined]
        raise
    finally:
        inference_mode.restore(output.initial_inference_modes)
        torch._C._set_grad_enabled(output.initial_grad_enabled)
        runtime.set_autocast(output.initial_autocast)
    return Trace(tx, output, guards, return_value)


def compile_graph_of(
    trace: Trace, codegen: FrameCodegen, compile_graph: Callable
) -> tuple[list[str] | None, list]:
    """Close the graph over its outputs and compile it; returns (argument sources, graph modules)."""
    output = trace.output
    output.prune_unused_sizes()
    if output.op_count() == 0 and not codegen.graph_outputs:
        return None, []
    guard_and_merge_aliases(output)
    graph = output.graph
    if output.autocast != output.initial_autocast:  # leave autocast as the graph found it
        graph.call_function(runtime.set_autocast, (output.initial_autocast,))
    graph.output(tuple(codegen.graph_outputs))
    use_is_causal(graph, output.writers, codegen.guards.shapes)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    logs.artifact(
        "graph",
        "captured graph of %s:\n%s",
        trace.translator.code.co_name,
        gm.print_readable(print_output=False),
    )
    example_inputs = [value for _, value, _ in output.inputs]
    codegen.guards.ns["___graph"] = inference_mode.compile_graph(gm, example_inputs, compile_graph)
    return [source for source, _, _ in output.inputs], [gm]


def finish_entry(
    fn: types.FunctionType, trace: Trace, codegen: FrameCodegen, source: str, **extra: Any
) -> CacheEntry:
    """Compile the guard and transformed functions into a ``CacheEntry``."""
    code = fn.__code__
    params = params_text(code)
    filename = f"<torchkiln {code.co_name} {code.co_filename}:{code.co_firstlineno}>"
    guard_distinct_objects(trace.output)
    guard, first_failure, guard_source = trace.guards.compile(params, filename)
    exec(compile(source, filename, "exec"), trace.guards.ns)
    logs.artifact("guards", "guards of %s:\n%s", code.co_name, guard_source)
    logs.artifact(
        "bytecode",
        "transformed %s (%s:%s):\n%s",
        code.co_name,
        code.co_filename,
        code.co_firstlineno,
        source,
    )
    descriptions = [g.description for g in trace.guards.ordered()]
    return CacheEntry(
        guard,
        trace.guards.ns["___transformed"],
        first_failure,
        guard_source,
        source,
        guard_descriptions=descriptions,
        guard_set=trace.guards,
        **extra,
    )


def capture_whole_frame(
    fn: types.FunctionType, trace: Trace, compile_graph: Callable
) -> CacheEntry:
    """The frame returned: one graph, then the return value and side effects."""
    codegen = FrameCodegen(trace.output, trace.guards)
    result = codegen.temp(codegen.reconstruct(trace.return_value))
    codegen.side_effects()
    graph_args, graphs = compile_graph_of(trace, codegen, compile_graph)
    tail = [*codegen.grad_mode_statements(), f"return {result}"]
    source = codegen.function_source(params_text(fn.__code__), graph_args, tail)
    return finish_entry(fn, trace, codegen, source, graphs=graphs, graph_args=graph_args)


def eager_entry(fn: types.FunctionType, guards: GuardSet, reason: Unsupported) -> CacheEntry:
    """Run the frame uncompiled for inputs that pass the guards gathered before ``reason``."""
    code = fn.__code__
    params = params_text(code)
    filename = f"<torchkiln eager {code.co_name}>"
    # the guards gathered before the capture failed; a size fact they can't print only
    # widens what runs in eager, which is right for any inputs
    guard, first_failure, guard_source = guards.compile(params, filename, lenient=True)
    source = call_original_source(code, "___transformed")
    exec(compile(source, filename, "exec"), guards.ns)
    descriptions = [g.description for g in guards.ordered()]
    return CacheEntry(
        guard,
        guards.ns["___transformed"],
        first_failure,
        guard_source,
        source,
        eager_reason=reason,
        guard_descriptions=descriptions,
        guard_set=guards,
    )


def capture_frame(fn: types.FunctionType, args: tuple, cfg: Any) -> CacheEntry:
    """Capture ``fn`` called with the frame locals ``args`` under ``cfg`` (a ``CaptureConfig``)."""
    with paused_saved_tensors_hooks():  # fake tensors are traced: not the user's to save
        return _capture_frame(fn, args, cfg)


def _capture_frame(fn: types.FunctionType, args: tuple, cfg: Any) -> CacheEntry:
    from torchkiln.capture.graph_break import capture_with_break

    trace = None
    try:
        trace = translate(fn, args)
        return capture_whole_frame(fn, trace, cfg.compile_graph)
    except (Unsupported, CaptureError) as e:
        if cfg.fullgraph:
            raise
        error = e if isinstance(e, Unsupported) else Unsupported(f"internal error: {e}")
        guards = getattr(e, "guards", None) or (trace.guards if trace else GuardSet({}))
        steps = getattr(e, "root_steps", None)
        if steps is not None:
            entry = capture_with_break(fn, args, cfg, steps, error, e.fakes)
            if entry is not None:
                return entry
        return eager_entry(fn, guards, error)
