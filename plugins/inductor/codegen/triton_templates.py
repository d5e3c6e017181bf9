"""Triton templates: mm, addmm, bmm and 2-D convolution with their pointwise epilogue in the
store.

In: a graph's :class:`~..templates.TemplateStep` s (a matmul or a convolution, and the plan of
the epilogue kernel fused into it, if any). Out: one ``@triton.jit`` function per step,
appended to the graph's :class:`~.triton.TritonModule`, and its :class:`TemplateLaunch`: what
the wrapper calls, and how the aten alternative computes the same buffers.
:mod:`..autotune.templates` measures both at the first call.

Each program computes a ``[BLOCK_M, BLOCK_N]`` tile of the product, looping over ``K`` in
``BLOCK_K`` steps: ``tl.dot`` of the operands in their own dtype, accumulated in float32
(float32 operands in TF32 only where eager's library call may use it: the ``TF32`` constexpr,
set when the template is tuned). Programs go in groups of ``GROUP_M`` rows of tiles, so that
neighbours share operand tiles in L2; a bmm's batch is the grid's second axis. Sizes and
strides are constants of the source (shapes are static), so any strides work, transposed
operands included, and Triton sees which are contiguous. Rows and columns past the product's
end read its first ones again (``% M``), which the store masks: inside the loop only a ``K``
that is no multiple of ``BLOCK_K`` needs a mask (``EVEN_K`` off).

A convolution is an implicit GEMM (as torch inductor's conv template): a row of the product
is an output position (image, y, x), a column an output channel, and the loop runs over the
kernel's taps and, in each, the input channels in ``BLOCK_K`` steps (``EVEN_K``: their
number is a multiple). A tap reads the input at ``y * stride - padding + tap_row *
dilation`` (and so for x); where padding puts that outside the image, the load's mask gives
zeros. The bias is added to the accumulator before the epilogue, as addmm's.

The epilogue: the tile's rows and columns are the pointwise generator's ``x`` and ``r`` axes
(``xindex``, ``r0index``); the accumulator (addmm: times alpha, plus beta times the added
tensor; a convolution: plus its bias; rounded to the product's dtype, as eager's stored
product is) is what the epilogue's reads of the product find (``TritonKernel.forwarded``), and
the pointwise generator emits the epilogue's nodes itself (``TritonKernel.emit_pointwise``) at
loop variables computed from the element (``TemplateStep.epilogue_vars``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..autotune.tuner import TuningSettings
from ..indexing import Expr, Var
from ..ir import GraphIR, StorageView
from ..kernel_plan import KernelPlan
from ..scheduler import FusedKernel
from ..templates import ConvStep, GemmStep, TemplateStep, epilogue_radix
from .triton import TritonKernel, TritonOpsHandler, TritonValue, _Tile
from .triton_module import KernelLaunch, TritonModule

#: the template's constexpr parameters, in order
TEMPLATE_META = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K", "TF32")


@dataclass(frozen=True)
class LibraryCall:
    """The aten alternative: the op on views of the params, then the epilogue kernel."""

    op: str  # "mm" | "addmm" | "bmm" | "convolution"
    # per aten argument: ("view", param, size, stride, offset) or ("const", value)
    args: tuple[tuple, ...]
    kwargs: tuple[tuple[str, Any], ...]
    # ``op.out`` writes the product (matmuls); else ``op`` returns a new tensor (convolution)
    out_variant: bool
    product: int | None  # the param the product goes to; None: a buffer of its own
    product_layout: tuple[tuple[int, ...], tuple[int, ...]]  # (size, stride)
    epilogue: KernelLaunch | None
    epilogue_args: tuple[int | None, ...]  # per epilogue param: a template param (None: product)


@dataclass(frozen=True)
class TemplateLaunch:
    """How the wrapper calls one template (``name(*params)``), and what the tuner needs."""

    name: str
    params: tuple[str, ...]  # buffer names, in argument order
    batch: int
    m: int
    n: int
    k: int  # what the template walks ``BLOCK_K`` at a time (``TemplateStep.block_k_extent``)
    dtype: torch.dtype  # of the operands
    library: LibraryCall
    dtypes: tuple[torch.dtype, ...]  # of the template function's buffers: Triton specializes
    # where the product the call returns goes among the template function's buffers (after
    # ``params[:returned]``); None: the call returns nothing (``TemplateStep.returns_product``)
    returned: int | None = None


def add_templates(
    module: TritonModule,
    launches: dict[str, Any],
    templates: list[TemplateStep],
    graph: GraphIR,
    tuning: TuningSettings,
) -> tuple[TritonModule, dict[str, Any]]:
    """``module`` with each template's function and launch; ``launches`` (the wrapper's, per
    step name) gets each template's :class:`TemplateLaunch` under its step's name."""
    if not templates:
        return module, launches
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    sources: dict[str, str] = {}
    added: dict[str, TemplateLaunch] = {}
    for step in templates:
        source_of, prefix = _SOURCES[type(step)]
        text, params = source_of(step, graph, interpreted)
        dtypes = tuple(graph.buffer(p).dtype for p in params)
        product = step.extern.name
        returned = None
        if step.returns_product and product in params:
            returned = params.index(product)
            params = [p for p in params if p != product]
        epilogue = launches[step.epilogue.kernel.name] if step.epilogue is not None else None
        library = _library(step, params, epilogue)
        a, _, _ = step.operands()
        batch, m, n, _ = step.sizes()
        launch = TemplateLaunch(
            "",
            tuple(params),
            batch,
            m,
            n,
            step.block_k_extent(),
            a.dtype,
            library,
            dtypes,
            returned,
        )
        # the same text and the same call but for the buffers passed: one function (layers)
        name = f"kiln_{prefix}_{_digest(text, launch)}"
        sources.setdefault(name, text.replace("KERNEL_NAME", name))
        launch = launches[step.name] = dataclasses.replace(launch, name=name)
        added.setdefault(name, launch)
    source = "\n\n\n".join([module.source.rstrip("\n"), *sources.values()]) + "\n"
    module = dataclasses.replace(
        module, source=source, templates=tuple(added.values()), template_tuning=tuning
    )
    return module, launches


def _digest(text: str, launch: TemplateLaunch) -> str:
    """A hash of the template's text and of its launch but the buffers it is passed (its
    epilogue kernel by name: the kernel's own launch names the step's buffers)."""
    library = launch.library
    epilogue = library.epilogue.name if library.epilogue is not None else None
    shape = (
        dataclasses.replace(launch, params=(), library=None),
        dataclasses.replace(library, epilogue=None),
        epilogue,
    )
    return hashlib.sha256(f"{text}\n{shape!r}".encode()).hexdigest()[:16]


def gemm_source(step: GemmStep, graph: GraphIR, interpreted: bool) -> tuple[str, list[str]]:
    """The matmul template's source (named ``KERNEL_NAME``) and its buffer params in order."""
    kernel = _template_kernel(step, graph)
    batch, m, n, k = step.sizes()
    a, b, _ = step.operands()
    bmm = step.op == "bmm"
    line = kernel.line
    _tile_indices(kernel, m, n)
    if bmm:
        line("bindex = tl.program_id(1)")
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
    batch_var = Expr.of(Var("bindex", batch)) if bmm else Expr()
    return _store_tile(kernel, step, batch_var, lambda h, row, col: _scaled(step, h, row, col))


def conv_source(step: ConvStep, graph: GraphIR, interpreted: bool) -> tuple[str, list[str]]:
    """The convolution template's source (named ``KERNEL_NAME``) and its buffer params."""
    kernel = _template_kernel(step, graph)
    g = step.geometry()
    _, m, n, _ = step.sizes()
    x, weight, bias = step.operands()
    (out_h, out_w), (kernel_h, kernel_w) = g.out, g.kernel
    x_n, x_c, x_h, x_w = x.stride
    w_o, w_i, w_h, w_w = weight.stride
    line = kernel.line
    _tile_indices(kernel, m, n)
    line(f"rows = rm % {m}  # past the end: rows the store masks")
    line(f"image = rows // {out_h * out_w}")
    # the input row and column of each output position's first tap
    y0, x0 = (
        _times(f"(rows // {out_w}) % {out_h}", g.stride[0]),
        _times(f"rows % {out_w}", g.stride[1]),
    )
    line(f"y0 = {y0}{f' - {g.padding[0]}' if g.padding[0] else ''}")
    line(f"x0 = {x0}{f' - {g.padding[1]}' if g.padding[1] else ''}")
    x_ptr, w_ptr = (kernel.param(v.buffer.name, written=False) for v in (x, weight))
    x_ptr += f" + {x.offset}" if x.offset else ""
    w_ptr += f" + {weight.offset}" if weight.offset else ""
    line(f"x_rows = {x_ptr} + {_times('image', x_n)}")
    line(f"w_cols = {w_ptr} + {_times(f'(rn % {n})[None, :]', w_o)}")
    line("acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)")
    line(f"k_steps = ({g.c_in} + BLOCK_K - 1) // BLOCK_K")
    line(f"for step in range(0, {kernel_h * kernel_w} * k_steps):")
    kernel.depth += 1
    line("ks = (step % k_steps) * BLOCK_K + rk")
    if kernel_h * kernel_w > 1:
        line("tap = step // k_steps")
        line(f"ty = tap // {kernel_w}")
        line(f"tx = tap % {kernel_w}")
        line(f"in_y = y0 + {_times('ty', g.dilation[0])}")
        line(f"in_x = x0 + {_times('tx', g.dilation[1])}")
        w_tap = f" + {_times('ty', w_h)} + {_times('tx', w_w)}"
    else:
        line("in_y = y0")
        line("in_x = x0")
        w_tap = ""
    x_offsets = f"{_times('in_y', x_h)} + {_times('in_x', x_w)}"
    line(f"a_ptrs = (x_rows + {x_offsets})[:, None] + {_times('ks[None, :]', x_c)}")
    line(f"b_ptrs = w_cols + {_times('ks[:, None]', w_i)}{w_tap}")
    # a tap outside the image reads the padding's zeros (output size: only padding can)
    inside = []
    for var, pad, size in (("in_y", g.padding[0], g.height), ("in_x", g.padding[1], g.width)):
        if pad:
            inside.append(f"({var} >= 0) & ({var} < {size})")
    if inside:
        line(f"inside = ({' & '.join(inside)})[:, None]")
    line("if EVEN_K:")
    line(f"    a = tl.load(a_ptrs{', mask=inside, other=0.0' if inside else ''})")
    line("    b = tl.load(b_ptrs)")
    line("else:")
    a_mask = f"{'inside & ' if inside else ''}(ks[None, :] < {g.c_in})"
    line(f"    a = tl.load(a_ptrs, mask={a_mask}, other=0.0)")
    line(f"    b = tl.load(b_ptrs, mask=ks[:, None] < {g.c_in}, other=0.0)")
    _dot(kernel, x.dtype, interpreted)
    kernel.depth -= 1

    def with_bias(handler: TritonOpsHandler, row: Expr, col: Expr) -> TritonValue:
        value = TritonValue("acc", torch.float32, frozenset("xr"))
        if bias is None:
            return value
        return handler.add(value, handler.load(bias.buffer.name, bias.layout().index([col])))

    return _store_tile(kernel, step, Expr(), with_bias)


#: per kind of step: its source's generator, and the prefix of its kernels' names
_SOURCES: dict[type, tuple[Callable[[Any, GraphIR, bool], tuple[str, list[str]]], str]] = {
    GemmStep: (gemm_source, "mm"),
    ConvStep: (conv_source, "conv"),
}


def _template_kernel(step: TemplateStep, graph: GraphIR) -> TritonKernel:
    """A kernel to print the template into: its epilogue's, or an empty one."""
    return TritonKernel(step.epilogue or KernelPlan(FusedKernel([], ()), [], [], set()), graph)


def _tile_indices(kernel: TritonKernel, m: int, n: int) -> None:
    """The program's tile (in groups of ``GROUP_M`` rows of tiles) and its row (``rm``),
    column (``rn``) and reduction (``rk``) indices."""
    line = kernel.line
    line("pid = tl.program_id(0)")
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


def _store_tile(
    kernel: TritonKernel,
    step: TemplateStep,
    batch: Expr,
    value_of: Callable[[TritonOpsHandler, Expr, Expr], TritonValue],
) -> tuple[str, list[str]]:
    """Store the tile: ``value_of(handler, row, col)`` (the aten op's result in float32)
    rounded to the product's dtype, where the product is stored, and through the epilogue;
    return the source and its buffer params."""
    _, m, n, _ = step.sizes()
    line = kernel.line
    line("xindex = rm[:, None]")
    line(f"xmask = xindex < {m}")
    line("r0index = rn[None, :]")
    line(f"r0indexmask = r0index < {n}")
    handler = TritonOpsHandler(kernel, _Tile("r0index", "BLOCK_N", xblock="BLOCK_M"))
    row, col = Expr.of(Var("xindex", m)), Expr.of(Var("r0index", n))
    position = step.product_index(batch, row, col)
    product = handler.to_dtype(value_of(handler, row, col), step.extern.layout.dtype)
    kernel.forwarded[(step.extern.name, position)] = product
    if step.store_product:
        handler.store(step.extern.name, position, product)
    if step.epilogue is not None:
        # every read of the product finds the accumulator: the plan's check, in these variables
        assert epilogue_radix(step.epilogue, step, position) == step.radix
        kernel.emit_pointwise(handler, step.epilogue_vars(position))
    head, params = kernel.header(TEMPLATE_META)
    return "\n".join(head + kernel.lines), params


def _scaled(step: GemmStep, handler: TritonOpsHandler, row: Expr, col: Expr) -> TritonValue:
    """The accumulator as the aten op's result in float32: addmm's ``alpha * acc + beta *
    bias`` (the bias not read when beta is 0, as eager)."""
    value = TritonValue("acc", torch.float32, frozenset("xr"))
    _, _, bias = step.operands()
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


def _times(term: str, k: int) -> str:
    return term if k == 1 else f"{term} * {k}"


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
        not step.returns_product,
        position.get(product),
        (layout.size, layout.stride),
        epilogue,
        epilogue_args,
    )
