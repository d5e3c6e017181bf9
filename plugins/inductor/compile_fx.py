"""The aten-graph compiler: passes -> lowering -> scheduling -> kernel plans -> C++ and
wrapper -> callable.

:func:`compile_fx` takes a functional aten graph (flat tensor placeholders,
flat tuple output; what the AOT layer hands a backend) and returns a
:class:`CompiledGraph` called as ``compiled(*flat_tensor_args)``. The steps
are split so that many graphs can share one compiler run
(:func:`generate` then :func:`compile_many`), which the test suite uses.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule
from torch.utils import _pytree as pytree

from torchkiln import logs
from torchkiln.exc import NotImplementedYet

from . import trace
from .artifact import CompiledGraph, GraphArtifact
from .autotune.cpp_kernels import CppTuning, cpp_tuning
from .autotune.tuner import LIGHT_TUNING, TuningSettings, cpp_gemm_not_templated
from .codegen.cpp import GeneratedKernel, generate_kernels, translation_unit
from .codegen.triton import generate_triton
from .codegen.triton_templates import add_templates
from .codegen.wrapper import WrapperCodegen
from .cpp_build import load_library
from .device import DeviceCaps, device_caps
from .graph import GraphLowering
from .ir import GraphIR, StorageView
from .kernel_plan import KernelPlan, plan_kernel
from .options import InductorOptions
from .passes import run_passes
from .scheduler import FusedKernel, Schedule, Scheduler
from .sizes import SizeFacts, SymbolicUnsupported, is_static, is_unbacked, size_facts
from .templates import plan_templates


@dataclass
class GeneratedGraph:
    """Everything generated for one graph, before the C++ is compiled."""

    graph: GraphIR
    schedule: Schedule
    plans: dict[str, KernelPlan]  # by kernel name
    kernels: list[GeneratedKernel]
    artifact: GraphArtifact
    options: InductorOptions
    timings: dict[str, float] = field(default_factory=dict)


def _ensure_meta(gm: GraphModule, example_inputs: list[Any]) -> None:
    if all("val" in n.meta for n in gm.graph.nodes if n.op not in ("output", "get_attr")):
        return
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(
        *[mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in example_inputs]
    )


def generate(
    gm: GraphModule, example_inputs: list[Any], options: InductorOptions
) -> GeneratedGraph:
    """Lower, schedule and generate ``gm``; with symbolic sizes in ``example_inputs`` (fake
    tensors of the AOT layer's symbolic graphs), code that serves every size in range; with
    sizes only the data gives (unbacked ``u0``: ``nonzero``'s count) in its nodes, code that
    reads them off the results that give them."""
    facts = SizeFacts.of([*example_inputs, *(n.meta.get("val") for n in gm.graph.nodes)])
    if not facts.ranges:
        return _generate(gm, example_inputs, options)
    try:
        return _generate_symbolic(gm, example_inputs, options, facts)
    except SymbolicUnsupported as e:
        unbacked = sorted(str(s) for s in facts.ranges if is_unbacked(s))
        if not unbacked:
            raise  # the core compiles the graph once per size instead
        # no compile per size serves a size that changes with the data
        raise NotImplementedYet(
            f"the inductor can't compile this graph for every value of {', '.join(unbacked)} "
            f"(sizes that depend on the data): {e}. Set "
            "torchkiln.config.capture_dynamic_output_shape_ops = False to break the graph at "
            "the op giving them instead"
        ) from e


def _generate_symbolic(
    gm: GraphModule, example_inputs: list[Any], options: InductorOptions, facts: SizeFacts
) -> GeneratedGraph:
    if options.max_autotune:
        raise SymbolicUnsupported("max_autotune measures kernels at concrete sizes")
    device = _device(gm, example_inputs)
    if options.max_autotune_gemm and device_caps(device, options.cpu_backend).name == "triton":
        raise SymbolicUnsupported("the Triton matmul templates take static sizes")
    env = facts.shape_env
    guards = len(env.guards), len(env.replacements)
    with size_facts(facts):
        try:
            generated = _generate(gm, example_inputs, options)
        except TypeError as e:  # int-only code met a symbolic size: compile per size instead
            raise SymbolicUnsupported(f"a step of the inductor needs concrete sizes ({e})") from e
    if (len(env.guards), len(env.replacements)) != guards:
        # a size was decided on while compiling: a guard the frame can no longer check (a
        # backward compiles after the frame's guards are made), so this code may serve sizes
        # it is wrong for
        raise SymbolicUnsupported(f"compiling decided on a size: {env.guards[guards[0] :]}")
    return generated


def _generate(
    gm: GraphModule, example_inputs: list[Any], options: InductorOptions
) -> GeneratedGraph:
    timings = {}
    t0 = time.perf_counter()
    single = not isinstance(_output_node(gm).args[0], (list, tuple))
    _ensure_meta(gm, example_inputs)
    tracer = trace.Tracer(options) if options.trace else None
    if tracer:
        tracer.write("fx_graph_before_passes.py", gm.print_readable(print_output=False))
    run_passes(gm)
    if tracer:
        tracer.write("fx_graph_after_passes.py", gm.print_readable(print_output=False))
    caps = device_caps(_device(gm, example_inputs), options.cpu_backend)
    graph = GraphLowering(gm, example_inputs, caps, options.fallback_random).lower()
    timings["lower"] = time.perf_counter() - t0
    output_names = {o.buffer.name for o in graph.outputs if isinstance(o, StorageView)}
    if tracer:
        tracer.write("ir_before_fusion.txt", graph.describe())
        unfused = Scheduler(graph, output_names, fuse=False).run()
        tracer.write("schedule_before_fusion.txt", _describe_schedule(unfused, caps))
    schedule = Scheduler(
        graph,
        output_names,
        epilogue_fusion=options.epilogue_fusion,
        independent_fusion=caps.independent_fusion,
    ).run()
    plans = _plans(schedule, caps)
    if tracer:
        tracer.write("schedule_after_fusion.txt", _describe_schedule(schedule, caps, plans))
    timings["schedule"] = time.perf_counter() - t0 - timings["lower"]
    tuned_cpp: CppTuning | None = None
    if caps.name == "triton":
        tuning = TuningSettings(options.autotune_max_trials, options.autotune_time_budget_s)
        light = LIGHT_TUNING if options.autotune_light else None
        module, launches = generate_triton(plans, graph, tuning if options.max_autotune else light)
        if options.max_autotune or options.max_autotune_gemm:
            templates = plan_templates(schedule, plans, output_names)
            module, launches = add_templates(module, launches, templates, graph, tuning)
        kernels: list[GeneratedKernel] = []
        wrapper = WrapperCodegen(graph, schedule, plans, launches, single)
        cpp_source = ""
    else:
        if options.max_autotune or options.max_autotune_gemm:
            cpp_gemm_not_templated()
        module = None
        by_step = generate_kernels(
            plans, graph, options.simdlen, options.threads, options.parallel_threshold
        )
        if options.max_autotune and by_step:
            tuned_cpp = cpp_tuning(plans, graph, by_step, options)
        kernels = list(by_step.values())
        wrapper = WrapperCodegen(graph, schedule, plans, by_step, single)
        cpp_source = translation_unit(kernels)
    wrapper_source = wrapper.generate()
    artifact = GraphArtifact(
        cpp_source,
        options.opt_level,
        tuple((k.name, len(k.params), bool(k.index_sizes), len(k.size_params)) for k in kernels),
        wrapper_source,
        wrapper.namespace,
        dict(graph.fallbacks),
        module,
        tuned_cpp,
    )
    generated = GeneratedGraph(graph, schedule, plans, kernels, artifact, options, timings)
    if logs.enabled("output_code"):
        logs.artifact("output_code", "%s", artifact.output_code())
    if tracer:
        tracer.write("output_code.py", artifact.output_code())
        if options.graph_diagram:
            tracer.draw_schedule(schedule)
    return generated


def compile_many(
    generated: list[GeneratedGraph], opt_level: str | None = None
) -> list[CompiledGraph]:
    """Compile the kernels of several graphs with one compiler run and bind each graph."""
    kernels = [k for g in generated for k in g.kernels]
    lib = None
    if kernels:
        level = opt_level or generated[0].options.opt_level
        lib = load_library(translation_unit(kernels), level)
    return [g.artifact.bind(lib, fresh=True) for g in generated]


def compile_fx(
    gm: GraphModule, example_inputs: list[Any], options: InductorOptions | None = None
) -> CompiledGraph:
    """Compile an aten-level graph into a callable."""
    options = options or InductorOptions()
    return generate(gm, example_inputs, options).artifact.load(fresh=True)


class StartedGraph:
    """A graph whose code is generated and whose kernels build on a thread of their own
    (:func:`start_compile_fx`); ``finish()`` waits for them and returns the callable."""

    def __init__(self, generated: GeneratedGraph, device: torch.device):
        #: per output, the strides the compiled graph gives it (None: a number, or symbolic)
        self.output_strides = [
            _static(v.stride) if isinstance(v, StorageView) else None
            for v in generated.graph.outputs
        ]
        on_device = (lambda: torch.cuda.device(device)) if device.type == "cuda" else nullcontext
        loader = ThreadPoolExecutor(1, thread_name_prefix="torchkiln-kernels")

        def load() -> CompiledGraph:
            with on_device():  # where Triton's launchers and compile workers look
                return generated.artifact.load(fresh=True)

        self._loaded = loader.submit(load)
        loader.shutdown(wait=False)

    def finish(self) -> CompiledGraph:
        return self._loaded.result()


def start_compile_fx(
    gm: GraphModule, example_inputs: list[Any], options: InductorOptions | None = None
) -> StartedGraph:
    """:func:`compile_fx` in two steps: the code is generated now, its kernels build on a
    thread until ``finish()``. The AOT layer generates a training graph's backward meanwhile
    (``aot_autograd(backward_ahead=True)``), so that on a GPU both graphs' Triton kernels
    compile in the workers at once."""
    options = options or InductorOptions()
    generated = generate(gm, example_inputs, options)
    return StartedGraph(generated, _device(gm, example_inputs))


def _static(sizes: tuple) -> tuple[int, ...] | None:
    """``sizes`` as ints, or None if one of them is symbolic."""
    return tuple(int(s) for s in sizes) if all(is_static(s) for s in sizes) else None


def _output_node(gm: GraphModule):
    return next(n for n in reversed(gm.graph.nodes) if n.op == "output")


def _device(gm: GraphModule, example_inputs: list[Any]) -> torch.device:
    """The device of the graph's tensors: its first tensor input's, else (``arange``,
    ``zeros`` with no input) the first tensor it makes; CPU for a graph without tensors."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    for node in gm.graph.nodes:
        for value in pytree.tree_leaves(node.meta.get("val")):
            if isinstance(value, torch.Tensor):
                return value.device
    return torch.device("cpu")


def _plans(schedule: Schedule, caps: DeviceCaps) -> dict[str, KernelPlan]:
    """Each kernel's plan; a kernel that writes nothing anyone reads (a buffer lowering made
    and then did not use) leaves the schedule: a Triton kernel can't be launched without
    arguments, and a C++ one would compute for nothing."""
    plans = {
        step.name: plan_kernel(step, schedule.internal, caps)
        for step in schedule.steps
        if isinstance(step, FusedKernel)
    }
    dead = {
        name
        for name, plan in plans.items()
        if not plan.stored and not any(n.is_scatter for n in plan.kernel.nodes)
    }
    schedule.steps = [s for s in schedule.steps if getattr(s, "name", None) not in dead]
    return {name: plan for name, plan in plans.items() if name not in dead}


def _describe_schedule(
    schedule: Schedule, caps: DeviceCaps, plans: dict[str, KernelPlan] | None = None
) -> str:
    """Each step in order, kernels with their plan and ops (``plans``: made if not given)."""
    plans = plans if plans is not None else _plans(schedule, caps)
    lines = []
    for step in schedule.steps:
        if isinstance(step, FusedKernel):
            lines.append(plans[step.name].describe())
        else:
            lines.append(f"extern {step.kernel.name}: {step.kernel.op}")
    lines += schedule.fusion_log
    return "\n".join(lines) + "\n"
