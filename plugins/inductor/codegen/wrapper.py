"""The Python wrapper: allocates buffers, calls kernels and extern ops in order.

The wrapper is generated as Python source (printed by
``TORCHKILN_LOGS=output_code``) and ``exec``-ed with the kernels bound as
ctypes functions (C++, called with data pointers) or Triton launchers (called
with the tensors). Buffers a kernel writes are allocated with
``torch.empty_strided`` in their planned layout; a buffer whose last reader
has run goes back to a pool and a later buffer of the same dtype and size
takes it over instead of allocating (buffer reuse); one that none takes over
is deleted where it died, so that peak memory stays near eager's. Inputs whose strides
differ from the ones the graph was compiled for are copied into that layout. A graph with
symbolic sizes reads each size symbol off its inputs first (``s0 = arg0.size(1)``): sizes
and strides in the source are expressions of them, and kernels take them as arguments. A
size only the data gives (unbacked: ``nonzero``'s count) is read off the result of the aten
call giving it, right after that call (``u0 = buf3.size(0)``).
"""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ..ir import (
    Buffer,
    ExternArg,
    ExternKernel,
    GraphIR,
    StorageView,
)
from ..kernel_plan import KernelPlan
from ..scheduler import ExternStep, FusedKernel, Schedule
from ..sizes import SymbolicUnsupported, is_static, size_text, symbols_of
from ..templates import TemplateStep
from .cpp import GeneratedKernel
from .extern_calls import binding_picks_only, python_binding
from .runtime import _fix_layout, _restride, _view, raise_index_error
from .triton_module import KernelLaunch


class WrapperCodegen:
    def __init__(
        self,
        graph: GraphIR,
        schedule: Schedule,
        plans: dict[str, KernelPlan],
        kernels: dict[str, GeneratedKernel] | dict[str, KernelLaunch],
        single_output: bool,
    ):
        self.graph = graph
        self.schedule = schedule
        self.plans = plans
        self.kernels = kernels
        self.single_output = single_output
        # what the generated source refers to besides ``torch`` (added when it is bound)
        self.namespace: dict[str, Any] = {
            "_empty": torch.empty_strided,
            "_view": _view,
            "_as_strided": torch.as_strided,
            "_fix_layout": _fix_layout,
            "_restride": _restride,
            "_python_binding": python_binding,
            "raise_index_error": raise_index_error,
        }
        self.lines: list[str] = []
        self._consts = 0
        #: Names of the extern ``OpOverload``s the source calls, each with whether torch's
        #: Python binding runs every call of it (``extern_calls``); ``generate`` binds each
        #: name to that binding, or else to the overload's C op.
        self._overloads: dict[str, bool] = {}

    def const(self, value: Any) -> str:
        if value is None or isinstance(value, (bool, int, str)):
            return repr(value)
        if isinstance(value, sympy.Expr):
            return size_text(value, python=True)
        if isinstance(value, (list, tuple)) and symbols_of(value):
            return sizes_text(value)
        if isinstance(value, float) and value == value and abs(value) != float("inf"):
            return repr(value)
        if isinstance(value, (list, tuple)) and all(
            v is None or isinstance(v, (bool, int, str)) for v in value
        ):
            return repr(list(value)) if isinstance(value, list) else repr(tuple(value))
        self._consts += 1
        name = f"_c{self._consts}"
        self.namespace[name] = value
        return name

    def view_expr(self, view: StorageView) -> str:
        if view.is_whole_buffer():
            return view.buffer.name
        name = view.buffer.name  # ``_view`` inline: one call less per view per call
        offset = f"{name}.storage_offset()"
        if view.offset != 0:
            offset += f" + {size_text(view.offset, python=True)}"
        return f"_as_strided({name}, {sizes_text(view.size)}, {sizes_text(view.stride)}, {offset})"

    def arg_expr(self, arg: ExternArg) -> str:
        if arg.kind == "tensor":
            return self.view_expr(arg.value)
        if arg.kind == "list":
            items = [
                self.view_expr(v) if isinstance(v, StorageView) else self.const(v)
                for v in arg.value
            ]
            return f"[{', '.join(items)}]"
        return self.const(arg.value)

    # -- planning ------------------------------------------------------------------
    def _reads_of(self, step) -> set[str]:
        if isinstance(step, FusedKernel):
            names: set[str] = set()
            for n in step.nodes:
                names |= n.read_names()
            return names
        if isinstance(step, TemplateStep):
            return step.read_names()
        return {v.buffer.name for v in step.kernel.tensor_args()}

    def _last_reads(self) -> dict[str, int]:
        last: dict[str, int] = {}
        for i, step in enumerate(self.schedule.steps):
            for name in sorted(self._reads_of(step)):  # stable source across hash seeds
                buf = self._buf(name)
                parent = getattr(buf, "parent", None)
                last[name] = i
                if parent is not None:
                    last[parent.name] = i
        for out in self.graph.outputs:
            if isinstance(out, StorageView):
                last[out.buffer.name] = len(self.schedule.steps)
                parent = getattr(out.buffer, "parent", None)
                if parent is not None:
                    last[parent.name] = len(self.schedule.steps)
        return last

    def _buf(self, name: str) -> Buffer:
        return self.graph.buffer(name)

    # -- generation --------------------------------------------------------------------
    def generate(self) -> str:
        g = self.graph
        out = self.lines
        out.append("def call(args):")
        body: list[str] = []
        n_args = max([b.position for b in g.inputs], default=-1) + 1
        if n_args:
            all_args = ", ".join(f"arg{i}" for i in range(n_args))
            body.append(f"{all_args}, = args" if n_args == 1 else f"{all_args} = args")
            body.append("args.clear()  # each input is freed after its last use")
        body += self._size_symbols()
        for b in g.inputs:  # ``_fix_layout`` inline: a call per input per call costs more
            numel = b.layout.storage_numel()
            if not is_static(numel) or numel > 1:
                arg, stride = f"arg{b.position}", sizes_text(b.layout.stride)
                body.append(f"if {arg}.stride() != {stride}: {arg} = _restride({arg}, {stride})")
        for c in g.constants:
            self.namespace[c.name] = c.value
        if g.seed_buffer is not None:
            where = g.seed_buffer.layout.device
            device = "" if where.type == "cpu" else f", device={self.const(where)}"
            body.append(
                f"seeds = torch.randint(-2**62, 2**62, ({g.num_seeds},), dtype=torch.int64{device})"
            )
        last = self._last_reads()
        self._strided_reads = self._kernel_reads_and_views()
        pool: dict[tuple, list[str]] = {}  # dead buffers a later one of their size may take
        dead_at: dict[str, int] = {}  # where in ``body`` each pooled buffer died
        owned: set[str] = set()
        bound = {b.name for b in g.inputs}
        # storage others may still alias: scatter targets, arguments of in-place aten calls
        aliased = {
            n.buffer.data.target
            for step in self.schedule.steps
            if isinstance(step, FusedKernel)
            for n in step.nodes
            if n.is_scatter
        }
        for step in self.schedule.steps:
            if isinstance(step, ExternStep) and step.kernel.mutates:
                aliased |= {v.buffer.name for v in step.kernel.tensor_args()}
        for i, step in enumerate(self.schedule.steps):
            if isinstance(step, FusedKernel):
                body += self._kernel_call(step, pool, owned)
            elif isinstance(step, TemplateStep):
                body += self._template_call(step, pool, owned)
                if self.kernels[step.name].returned is not None:
                    bound.add(step.extern.name)
            else:
                body += self._extern_call(step)
                bound.add(step.kernel.name)
                bound.update(o.name for o in step.kernel.outputs)
            if isinstance(step, FusedKernel):
                bound.update(n.name for n in step.nodes if n.is_scatter)
            for name, when in last.items():
                if when != i or (name not in owned and name not in bound):
                    continue
                if name in owned and name not in aliased:
                    pool.setdefault(self._pool_key(self._buf(name)), []).append(name)
                    dead_at[name] = len(body)
                else:
                    body.append(f"del {name}")
        # a dead buffer no later one took over is freed where it died, not held to the end
        never_reused = [name for names in pool.values() for name in names]
        for name in sorted(never_reused, key=dead_at.__getitem__, reverse=True):
            body.insert(dead_at[name], f"del {name}")
        body.append(f"return {self._outputs()}")
        out += ["    " + line for line in body]
        # run once, when the source is bound: ``OpOverload.__call__`` only forwards to its C op,
        # and torch's Python binding, where it can only run the same overload, is quicker
        out += [
            f"{fn} = _python_binding({fn})" if binding else f"{fn} = {fn}._op"
            for fn, binding in sorted(self._overloads.items())
        ]
        return "\n".join(out) + "\n"

    def _size_symbols(self) -> list[str]:
        """Lines reading each size symbol off the inputs (none for a static graph)."""
        sources = self.graph.size_sources
        used = symbols_of(
            [b.layout.size for b in self.graph.buffers if b.layout is not None]
            + [b.layout.stride for b in (*self.graph.inputs, *self.graph.buffers) if b.layout]
        )
        missing = sorted(str(s) for s in used if s not in sources)
        if missing:
            raise SymbolicUnsupported(f"no input gives the size symbols {', '.join(missing)}")
        inputs = sorted((s for s in sources if s not in self.graph.size_definers), key=str)
        return [f"{s} = {sources[s]}" for s in inputs]

    def _unbacked_sizes(self, ext: ExternKernel) -> list[str]:
        """Lines reading the sizes only ``ext``'s result gives (``u0 = buf3.size(0)``): every
        step using them comes after it (the scheduler orders them so)."""
        defined = [s for s, name in self.graph.size_definers.items() if name == ext.name]
        return [f"{s} = {self.graph.size_sources[s]}" for s in sorted(defined, key=str)]

    @staticmethod
    def _pool_key(buf: Buffer) -> tuple:
        return (buf.layout.dtype, buf.layout.storage_numel())

    def _allocate(self, buf: Buffer, pool, owned: set[str]) -> str:
        """The line giving ``buf`` storage: a dead buffer of its size, or a new one."""
        owned.add(buf.name)
        lay = buf.layout
        free = pool.get(self._pool_key(buf))
        if free:
            old = free.pop()
            old_lay = self._buf(old).layout
            # the old name goes: it would hold the storage until the call returns, after
            # the new one's last reader (a 48 MiB buffer per chain of reuses in GPT-2)
            if (old_lay.size, old_lay.stride) == (lay.size, lay.stride):
                return f"{buf.name} = {old}; del {old}  # reuses {old}"  # no as_strided call
            size, stride = sizes_text(lay.size), sizes_text(lay.stride)
            return f"{buf.name} = _view({old}, {size}, {stride}, 0); del {old}  # reuses {old}"
        device = "" if lay.device.type == "cpu" else f", device={self.const(lay.device)}"
        size, stride = sizes_text(lay.size), sizes_text(lay.stride)
        return f"{buf.name} = _empty({size}, {stride}, dtype={lay.dtype}{device})"

    def _template_call(self, step: TemplateStep, pool, owned: set[str]) -> list[str]:
        """A matmul or convolution template (tuned against the aten call at its first call)
        writing the product where others read it (a convolution's call returns it) and its
        epilogue's buffers."""
        launch = self.kernels[step.name]
        returned = launch.returned is not None
        lines = [
            self._allocate(buf, pool, owned)
            for buf in step.stored()
            if not (returned and buf is step.extern)
        ]
        call = f"{launch.name}({', '.join(launch.params)})"
        return [*lines, f"{step.extern.name} = {call}" if returned else call]

    def _kernel_call(self, step: FusedKernel, pool, owned: set[str]) -> list[str]:
        plan = self.plans[step.name]
        kernel = self.kernels[step.name]
        lines = [
            self._allocate(node.buffer, pool, owned)
            for node in step.nodes
            if node.name in plan.stored
        ]
        if isinstance(kernel, KernelLaunch):  # a Triton launcher takes the tensors
            # and, where the kernel takes sizes, the extent of its grid first and them last
            xnumel = [size_text(kernel.xnumel, python=True)] if kernel.size_params else []
            args = ", ".join([*xnumel, *kernel.params, *kernel.size_params])
        else:
            pointers = [f"{name}.data_ptr()" for name, _ in kernel.params]
            args = ", ".join([*pointers, *kernel.size_params])
        if isinstance(kernel, GeneratedKernel) and kernel.index_sizes:
            lines.append(f"if bad_index := {kernel.name}({args}):")
            lines.append(f"    raise_index_error(bad_index, {sizes_text(kernel.index_sizes)})")
        else:
            lines.append(f"{kernel.name}({args})")
        for node in step.nodes:
            if node.is_scatter:
                lines.append(f"{node.name} = {node.buffer.data.target}  # written in place")
        return lines

    def _extern_call(self, step: ExternStep) -> list[str]:
        ext: ExternKernel = step.kernel
        fn = "".join(c if c.isalnum() else "_" for c in str(ext.op))
        self.namespace[fn] = ext.op
        if isinstance(ext.op, torch._ops.OpOverload):
            fits = binding_picks_only(ext.op, len(ext.args), ext.kwargs)
            self._overloads[fn] = self._overloads.get(fn, True) and fits
        args = [self.arg_expr(a) for a in ext.args]
        args += [f"{k}={self.arg_expr(v)}" for k, v in ext.kwargs.items()]
        call = f"{fn}({', '.join(args)})"
        comment = f"  # {ext.reason}" if ext.reason != "extern kernel" else ""
        if ext.layout is None and not ext.outputs:
            return [f"{call}{comment}"]
        lines = [f"{ext.name} = {call}{comment}"]
        lines += [f"{o.name} = {ext.name}[{o.index}]" for o in ext.outputs]
        lines += self._unbacked_sizes(ext)  # the checked strides may name them
        for result in ext.outputs or [ext]:
            lines += self._checked_layout(result)
        return lines

    def _checked_layout(self, buf: Buffer) -> list[str]:
        """Kernels and views index an extern result with the strides tracing predicted (an
        op's fake kernel can disagree with its real one): make sure of them."""
        numel = buf.layout.storage_numel()
        if (is_static(numel) and numel <= 1) or buf.name not in self._strided_reads:
            return []
        return [f"{buf.name} = _fix_layout({buf.name}, {sizes_text(buf.layout.stride)})"]

    def _kernel_reads_and_views(self) -> set[str]:
        """Buffers whose strides matter: read by a kernel, or passed on as a strided view."""
        names: set[str] = set()
        views = [v for v in self.graph.outputs if isinstance(v, StorageView)]
        for step in self.schedule.steps:
            if isinstance(step, (FusedKernel, TemplateStep)):  # their sources hold the strides
                names |= self._reads_of(step)
            else:
                views += step.kernel.tensor_args()
        return names | {v.buffer.name for v in views if not v.is_whole_buffer()}

    def _outputs(self) -> str:
        items = []
        for value in self.graph.outputs:
            if isinstance(value, StorageView):
                items.append(self._output_view(value))
            else:
                items.append(self.const(value))
        if self.single_output:
            return items[0]
        return f"({', '.join(items)},)" if len(items) == 1 else f"({', '.join(items)})"

    def _output_view(self, view: StorageView) -> str:
        return self.view_expr(view)


def sizes_text(sizes) -> str:
    """A tuple (or list) of sizes as Python source: ``(4, 6)``, ``(s0, 6*s0)``."""
    items = [size_text(s, python=True) for s in sizes]
    if isinstance(sizes, list):
        return f"[{', '.join(items)}]"
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
