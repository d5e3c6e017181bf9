"""Triton GEMM templates: mm, addmm and bmm with their pointwise epilogue in the store.

In: a graph's :class:`~..templates.TemplateStep` s (a matmul, and the plan of the epilogue
kernel fused into it, if any). Out: one ``@triton.jit`` function per step, appended to the
graph's :class:`~.triton.TritonModule`, and its :class:`GemmLaunch`: what the wrapper calls,
and how the aten alternative computes the same buffers. :mod:`..autotune.gemm` measures
both at the first call.

Each program computes a ``[BLOCK_M, BLOCK_N]`` tile of the product, looping over ``K`` in
``BLOCK_K`` steps: ``tl.dot`` of the operands in their own dtype, accumulated in float32
(float32 operands in TF32 only where ``torch.backends.cuda.matmul.allow_tf32`` allows it, as
eager's cuBLAS call: the ``TF32`` constexpr, set when the matmul is tuned). Programs go in groups of ``GROUP_M`` rows of
tiles, so that neighbours share operand tiles in L2; a bmm's batch is the grid's second axis.
Sizes and strides are constants of the source (shapes are static), so any strides work,
transposed operands included, and Triton sees which are contiguous. Rows and columns past
the product's end read its first ones again (``% M``), which the store masks: inside the loop
only a ``K`` that is no multiple of ``BLOCK_K`` needs a mask (``EVEN_K`` off).

The epilogue: the tile's rows and columns are the pointwise generator's ``x`` and ``r`` axes
(``xindex``, ``r0index``); the accumulator (addmm: times alpha, plus beta times the added
tensor; rounded to the product's dtype, as eager's stored product is) is what the epilogue's
reads of the product find (``TritonKernel.forwarded``), and the pointwise generator emits
the epilogue's nodes itself (``TritonKernel.emit_pointwise``) at loop variables computed
from the element (``TemplateStep.epilogue_vars``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from typing import Any

import torch

from ..autotune.tuner import TuningSettings
from ..indexing import Expr, Var
from ..ir import GraphIR, StorageView
from ..kernel_plan import KernelPlan
from ..scheduler import FusedKernel
from ..templates import TemplateStep, epilogue_radix
from .triton import KernelLaunch, TritonKernel, TritonModule, TritonOpsHandler, TritonValue, _Tile

#: the template's constexpr parameters, in order
TEMPLATE_META = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K", "TF32")


@dataclass(frozen=True)
class LibraryCall:
    """The aten alternative: ``op.out`` on views of the params, then the epilogue kernel."""

    op: str  # "mm" | "addmm" | "bmm"
    # per aten argument: ("view", param, size, stride, offset) or ("const", value)
    args: tuple[tuple, ...]
    kwargs: tuple[tuple[str, Any], ...]
    product: int | None  # the param the product goes to; None: a buffer of its own
    product_layout: tuple[tuple[int, ...], tuple[int, ...]]  # (size, stride)
    epilogue: KernelLaunch | None
    epilogue_args: tuple[int | None, ...]  # per epilogue param: a template param (None: product)


@dataclass(frozen=True)
class GemmLaunch:
    """How the wrapper calls one template (``name(*params)``), and what the tuner needs."""

    name: str
    params: tuple[str, ...]  # buffer names, in argument order
    batch: int
    m: int
    n: int
    k: int
    dtype: torch.dtype  # of the operands
    library: LibraryCall
    dtypes: tuple[torch.dtype, ...]  # of the params' buffers: what Triton specializes on


def add_gemm_templates(
    module: TritonModule,
    launches: dict[str, Any],
    templates: list[TemplateStep],
    graph: GraphIR,
    tuning: TuningSettings,
) -> tuple[TritonModule, dict[str, Any]]:
    """``module`` with each template's function and launch; ``launches`` (the wrapper's, per
    step name) gets each template's :class:`GemmLaunch` under its step's name."""
    if not templates:
        return module, launches
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    sources, gemms = [], []
    for step in templates:
        text, params = gemm_source(step, graph, interpreted)
        name = f"kiln_mm_{hashlib.sha256(text.encode()).hexdigest()[:16]}"
        sources.append(text.replace("KERNEL_NAME", name))
        epilogue = launches[step.epilogue.kernel.name] if step.epilogue is not None else None
        a, _, _ = step.operands()
        library = _library(step, params, epilogue)
        dtypes = tuple(graph.buffer(p).dtype for p in params)
        launch = GemmLaunch(name, tuple(params), *step.sizes(), a.dtype, library, dtypes)
        launches[step.name] = launch
        gemms.append(launch)
    source = "\n\n\n".join([module.source.rstrip("\n"), *sources]) + "\n"
    module = dataclasses.replace(
        module, source=source, templates=tuple(gemms), template_tuning=tuning
    )
    return module, launches


def gemm_source(step: TemplateStep, graph: GraphIR, interpreted: bool) -> tuple[str, list[str]]:
    """The template's source (named ``KERNEL_NAME``) and its buffer params in order."""
    plan = step.epilogue or KernelPlan(FusedKernel([], ()), [], [], set())
    kernel = TritonKernel(plan, graph)
    batch, m, n, k = step.sizes()
    a, b, bias = step.operands()
    bmm = step.op == "bmm"
    line = kernel.line
    line("pid = tl.program_id(0)")
    if bmm:
        line("bindex = tl.program_id(1)")
    line(f"grid_m = ({m} + BLOCK_M - 1) // BLOCK_M")
    line(f"grid_n = ({n} + BLOCK_N - 1) // BLOCK_N")
    line("group = GROUP_M * grid_n")
    line("first_m = (pid // group) * GROUP_M")
    line("rows_in_group = tl.minimum(grid_m - first_m, GROUP_M)")
    line("pid_m = first_m + (pid % group) % rows_in_group")
    line("pid_n = (pid % group) // rows_in_group")
    line("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    line("rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
    line("rk = tl.arange(0, BLOCK_K)")
    line(f"a_rows = (rm % {m})[:, None]  # past the end: rows the store masks")
    line(f"b_cols = (rn % {n})[None, :]")
    batch_index = ["bindex"] if bmm else []
    a_ptr, b_ptr = (kernel.param(v.buffer.name, written=False) for v in (a, b))
    line(f"a_ptrs = {a_ptr} + ({_offsets(a, [*batch_index, 'a_rows', 'rk[None, :]'])})")
    line(f"b_ptrs = {b_ptr} + ({_offsets(b, [*batch_index, 'rk[:, None]', 'b_cols'])})")
    line("acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)")
    line(f"for k0 in range(0, {k}, BLOCK_K):")
    kernel.depth += 1
    line("if EVEN_K:")
    line("    a = tl.load(a_ptrs)")
    line("    b = tl.load(b_ptrs)")
    line("else:")
    line(f"    a = tl.load(a_ptrs, mask=rk[None, :] < {k} - k0, other=0.0)")
    line(f"    b = tl.load(b_ptrs, mask=rk[:, None] < {k} - k0, other=0.0)")
    _dot(kernel, a.dtype, interpreted)
    line(f"a_ptrs += BLOCK_K * {a.stride[-1]}")
    line(f"b_ptrs += BLOCK_K * {b.stride[-2]}")
    kernel.depth -= 1
    line("xindex = rm[:, None]")
    line(f"xmask = xindex < {m}")
    line("r0index = rn[None, :]")
    line(f"r0indexmask = r0index < {n}")
    handler = TritonOpsHandler(kernel, _Tile("r0index", "BLOCK_N", xblock="BLOCK_M"))
    row, col = Expr.of(Var("xindex", m)), Expr.of(Var("r0index", n))
    position = step.product_index(Expr.of(Var("bindex", batch)) if bmm else Expr(), row, col)
    value = _scaled(step, handler, bias, row, col)
    product = handler.to_dtype(value, step.extern.layout.dtype)
    kernel.forwarded[(step.extern.name, position)] = product
    if step.store_product:
        handler.store(step.extern.name, position, product)
    if step.epilogue is not None:
        # every read of the product finds the accumulator: the plan's check, in these variables
        assert epilogue_radix(step.epilogue, step, position) == step.radix
        kernel.emit_pointwise(handler, step.epilogue_vars(position))
    head, params = kernel.header(TEMPLATE_META)
    return "\n".join(head + kernel.lines), params


def _scaled(
    step: TemplateStep, handler: TritonOpsHandler, bias: StorageView | None, row: Expr, col: Expr
) -> TritonValue:
    """The accumulator as the aten op's result in float32: addmm's ``alpha * acc + beta *
    bias`` (the bias not read when beta is 0, as eager)."""
    value = TritonValue("acc", torch.float32, frozenset("xr"))
    if bias is None:
        return value
    alpha, beta = step.scale()
    handler.kernel.param(bias.buffer.name, written=False)  # the aten choice's argument
    if alpha != 1:
        value = handler.mul(value, handler.constant(alpha, torch.float32))
    if beta == 0:
        return value
    index = [row, col][2 - len(bias.size) :]  # broadcast from the right
    index = [Expr() if size == 1 else i for i, size in zip(index, bias.size, strict=True)]
    term = handler.load(bias.buffer.name, bias.layout().index(index))
    if beta != 1:
        term = handler.mul(term, handler.constant(beta, torch.float32))
    return handler.add(value, term)


def _offsets(view: StorageView, terms: list[str]) -> str:
    """``view``'s element offsets: its offset plus each dimension's stride times ``terms``."""
    parts = [f"{stride} * {term}" for stride, term in zip(view.stride, terms, strict=True)]
    if view.offset:
        parts.insert(0, str(view.offset))
    return " + ".join(parts)


def _dot(kernel: TritonKernel, dtype: torch.dtype, interpreted: bool) -> None:
    """``acc += tl.dot`` of the loaded tiles at eager's precision. Triton's interpreter
    multiplies bfloat16 tiles wrongly: there they go in as float32 (the same exact products)."""
    if dtype == torch.float32:
        kernel.line("if TF32:")
        kernel.line('    acc += tl.dot(a, b, input_precision="tf32")')
        kernel.line("else:")
        kernel.line('    acc += tl.dot(a, b, input_precision="ieee")')
    elif dtype == torch.bfloat16 and interpreted:
        kernel.line('acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")')
    else:
        kernel.line("acc += tl.dot(a, b)")


def _library(step: TemplateStep, params: list[str], epilogue: KernelLaunch | None) -> LibraryCall:
    position = {name: i for i, name in enumerate(params)}

    def argument(arg) -> tuple:
        if arg.kind == "tensor":
            v = arg.value
            return ("view", position[v.buffer.name], v.size, v.stride, v.offset)
        return ("const", arg.value)

    product = step.extern.name
    epilogue_args: tuple[int | None, ...] = ()
    if epilogue is not None:
        missing = set(epilogue.params) - set(position) - {product}
        assert not missing, f"the template lacks the epilogue kernel's buffers {missing}"
        epilogue_args = tuple(None if p == product else position[p] for p in epilogue.params)
    layout = step.extern.layout
    return LibraryCall(
        step.op,
        tuple(argument(arg) for arg in step.extern.args),
        tuple((name, arg.value) for name, arg in step.extern.kwargs.items()),
        position.get(product),
        (layout.size, layout.stride),
        epilogue,
        epilogue_args,
    )
