"""Which matmuls and convolutions run as templates, and which pointwise kernel each one's
store takes in.

With ``max_autotune_gemm`` (or ``max_autotune``) on the Triton target, every aten ``mm``,
``addmm``, ``bmm`` and 2-D ``convolution`` call of the schedule whose operands a template
handles (float32, float16 or bfloat16, any strides, fewer than 2**31 elements; a convolution
neither grouped nor transposed) becomes a :class:`TemplateStep`: a choice, measured at its
first call, between the template in each of its block configs with the epilogue fused into
its store, and the aten call followed by the epilogue as its own kernel
(:mod:`.codegen.triton_templates`, :mod:`.autotune.templates`).

A template computes a product of ``M x N`` elements (per batch) reduced over ``K``: a
matmul's, or a convolution's as an implicit GEMM, whose rows are the output's (image, row,
column) positions, whose columns are its channels, and whose ``K`` runs over the kernel's
taps and the input channels (:class:`ConvStep`). Each step says where the element at (batch,
row, column) of that product lies in the aten call's result (``product_index``).

The epilogue is the first step that reads the product, when it is a kernel pointwise over the
product's own elements: its outer loops enumerate them and every read of the product is at
the element the loops are at (bias add, activation, residual add, batch norm with running
statistics, cast, scaling). Its loop variables are then functions of the product's flat
position, found by inverting that read (``o_i = (position // coefficient_i) % size_i``) and
checked by substituting them back. The step takes the epilogue's place in the schedule, and
stores the product too when anything else reads it (a graph output, a later step: the
backward's saved value). A first reader that reduces, reads the product at other elements or
loops over another space stays a kernel of its own; the template then stores the product
where the aten call did.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .indexing import Expr, Var
from .ir import ExternKernel, Layout, StorageView
from .kernel_plan import KernelPlan
from .scheduler import OUTER, ExternStep, FusedKernel, Schedule, kernel_vars

_aten = torch.ops.aten
#: the aten matmuls a template computes, by name
GEMM_OPS = {_aten.mm.default: "mm", _aten.addmm.default: "addmm", _aten.bmm.default: "bmm"}
CONVOLUTION = _aten.convolution.default
#: operand dtypes (``tl.dot`` accumulates them in float32)
TEMPLATE_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
#: templates index with 32-bit offsets: larger buffers stay aten calls
MAX_ELEMENTS = 2**31


@dataclass
class TemplateStep:
    """The aten call ``extern`` computed by a template, ``epilogue`` (a pointwise kernel's
    plan, or None) fused into its store; ``radix``: per outer loop of the epilogue, its
    coefficient in the product's flat position and its size. Its kinds, :class:`GemmStep`
    and :class:`ConvStep`, say what the product is: ``op`` (the aten op's name),
    ``operands()``, ``sizes()`` (batch, M, N, K), ``block_k_extent()`` and
    ``product_index(batch, row, col)`` (where that element of the product lies in the aten
    call's result)."""

    name: str
    extern: ExternKernel
    epilogue: KernelPlan | None
    store_product: bool
    radix: tuple[tuple[int, int], ...] = ()

    #: the aten call allocates its result (it has no ``out=`` variant that writes in place):
    #: the template call returns the product, where it is stored, instead of writing a buffer
    #: the wrapper allocated
    returns_product: ClassVar[bool] = False

    def epilogue_vars(self, position: Expr) -> list[Expr]:
        """The epilogue's outer loop variables at the product's flat ``position``."""
        return [position.floordiv(c).mod(size) for c, size in self.radix]

    def read_names(self) -> set[str]:
        names = {v.buffer.name for v in self.extern.tensor_args()}
        if self.epilogue is not None:
            names |= set(self.epilogue.inputs) - {self.extern.name}
        return names

    def stored(self) -> list:
        """The buffers the step writes: the product if read elsewhere, the epilogue's stores."""
        out = [self.extern] if self.store_product else []
        if self.epilogue is not None:
            plan = self.epilogue
            out += [n.buffer for n in plan.kernel.nodes if n.name in plan.stored]
        return out


@dataclass
class GemmStep(TemplateStep):
    """An ``mm``, ``addmm`` or ``bmm``."""

    @property
    def op(self) -> str:
        return GEMM_OPS[self.extern.op]

    def operands(self) -> tuple[StorageView, StorageView, StorageView | None]:
        """(a, b, bias): ``[batch,] M x K``, ``[batch,] K x N`` and addmm's added tensor."""
        views = [arg.value for arg in self.extern.args]
        return (views[1], views[2], views[0]) if self.op == "addmm" else (*views, None)

    def scale(self) -> tuple[float, float]:
        """addmm's ``(alpha, beta)``: ``alpha * a @ b + beta * bias``."""
        kwargs = self.extern.kwargs
        return tuple(kwargs[k].value if k in kwargs else 1 for k in ("alpha", "beta"))

    def sizes(self) -> tuple[int, int, int, int]:
        """(batch, M, N, K)."""
        a, b, _ = self.operands()
        batch = a.size[0] if self.op == "bmm" else 1
        return batch, a.size[-2], b.size[-1], a.size[-1]

    def block_k_extent(self) -> int:
        """The length of the loop the template walks ``BLOCK_K`` at a time: K."""
        return self.sizes()[3]

    def product_index(self, batch: Expr, row: Expr, col: Expr) -> Expr:
        """Where element (``batch``, ``row``, ``col``) of the product is in its buffer."""
        layout: Layout = self.extern.layout
        return layout.index([batch, row, col] if self.op == "bmm" else [row, col])

    @staticmethod
    def handles(ext: ExternKernel) -> bool:
        """A matmul of float operands of one dtype, none empty or too large for 32-bit
        offsets, addmm's scales numbers."""
        if ext.op not in GEMM_OPS or ext.layout is None:
            return False
        if any(arg.kind != "tensor" for arg in ext.args):
            return False
        if set(ext.kwargs) - {"alpha", "beta"}:
            return False
        if any(not isinstance(arg.value, (int, float)) for arg in ext.kwargs.values()):
            return False
        return _fits([arg.value for arg in ext.args], ext.layout)


@dataclass(frozen=True)
class ConvGeometry:
    """A 2-D convolution's sizes: input ``[batch, c_in, height, width]``, weight ``[c_out,
    c_in, kernel...]``, output ``[batch, c_out, out...]``; per spatial dimension (height,
    width) its stride, padding and dilation."""

    batch: int
    c_in: int
    height: int
    width: int
    c_out: int
    kernel: tuple[int, int]
    out: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]


@dataclass
class ConvStep(TemplateStep):
    """A 2-D ``convolution``: the product is its ``[batch * out_h * out_w, c_out]`` implicit
    GEMM, reduced over ``c_in * kernel_h * kernel_w``; aten's call returns a new tensor."""

    returns_product: ClassVar[bool] = True

    @property
    def op(self) -> str:
        return "convolution"

    def operands(self) -> tuple[StorageView, StorageView, StorageView | None]:
        """(input, weight, bias)."""
        x, weight, bias = (arg.value for arg in self.extern.args[:3])
        return x, weight, bias

    def geometry(self) -> ConvGeometry:
        x, weight, _ = self.operands()
        stride, padding, dilation = (tuple(arg.value) for arg in self.extern.args[3:6])
        _, _, *out = self.extern.layout.size
        return ConvGeometry(
            *x.size, weight.size[0], tuple(weight.size[2:]), tuple(out), stride, padding, dilation
        )

    def sizes(self) -> tuple[int, int, int, int]:
        """(1, M, N, K) of the implicit GEMM."""
        g = self.geometry()
        return 1, g.batch * math.prod(g.out), g.c_out, g.c_in * math.prod(g.kernel)

    def block_k_extent(self) -> int:
        """The length of the loop the template walks ``BLOCK_K`` at a time, once per tap:
        the input channels."""
        return self.geometry().c_in

    def product_index(self, batch: Expr, row: Expr, col: Expr) -> Expr:
        """Where output channel ``col`` at (image, y, x) number ``row`` is in the result."""
        out_h, out_w = self.geometry().out
        image, y, x = row.floordiv(out_h * out_w), row.floordiv(out_w).mod(out_h), row.mod(out_w)
        return self.extern.layout.index([image, col, y, x])

    @staticmethod
    def handles(ext: ExternKernel) -> bool:
        """A 2-D convolution, neither grouped nor transposed, of float tensors of one dtype,
        none empty or too large for 32-bit offsets."""
        if ext.op is not CONVOLUTION or ext.layout is None or ext.kwargs or len(ext.args) != 9:
            return False
        x, weight, bias, stride, padding, dilation, transposed, _, groups = ext.args
        if x.kind != "tensor" or weight.kind != "tensor" or bias.kind == "list":
            return False
        if len(x.value.size) != 4 or transposed.value or groups.value != 1:
            return False
        if any(len(arg.value) != 2 for arg in (stride, padding, dilation)):
            return False
        views = [x.value, weight.value] + ([bias.value] if bias.kind == "tensor" else [])
        return _fits(views, ext.layout)


def _fits(views: list[StorageView], layout: Layout) -> bool:
    """Whether a template reads ``views`` and writes ``layout``: float, of one dtype, none
    empty, all within 32-bit offsets."""
    dtype = layout.dtype
    if dtype not in TEMPLATE_DTYPES or any(v.dtype != dtype for v in views):
        return False
    layouts = [v.buffer.layout for v in views] + [layout]
    if any(lay.storage_numel() >= MAX_ELEMENTS for lay in layouts):
        return False
    return all(s > 0 for v in views for s in v.size)


def template_for(ext: ExternKernel) -> type[TemplateStep] | None:
    """The kind of template that computes this aten call, if any."""
    return next((kind for kind in (GemmStep, ConvStep) if kind.handles(ext)), None)


def plan_templates(
    schedule: Schedule, plans: dict[str, KernelPlan], output_names: set[str]
) -> list[TemplateStep]:
    """Replace each matmul and convolution of ``schedule.steps`` that a template computes by
    a :class:`TemplateStep` (at its epilogue's place when one fuses) and return them."""
    steps = schedule.steps
    reads = [_reads(step) for step in steps]
    placed: dict[int, TemplateStep] = {}  # position -> the template that runs there
    moved: set[int] = set()  # positions of matmuls whose template runs at their epilogue
    for i, step in enumerate(steps):
        kind = template_for(step.kernel) if isinstance(step, ExternStep) else None
        if kind is None:
            continue
        product = step.kernel
        readers = [j for j in range(i + 1, len(steps)) if product.name in reads[j]]
        template = kind(f"template{len(placed)}", product, None, True)
        at = i
        if readers and readers[0] not in placed and _no_writes_between(steps, i, readers[0]):
            kernel = steps[readers[0]]
            plan = plans.get(getattr(kernel, "name", ""))
            radix = epilogue_radix(plan, template) if plan is not None else None
            if radix is not None:
                others = len(readers) > 1 or product.name in output_names
                template = kind(template.name, product, plan, others, radix)
                at = readers[0]
                moved.add(i)
        placed[at] = template
    schedule.steps = [placed.get(j, s) for j, s in enumerate(steps) if j not in moved]
    return list(placed.values())


def epilogue_radix(
    plan: KernelPlan, template: TemplateStep, position: Expr | None = None
) -> tuple[tuple[int, int], ...] | None:
    """Per outer loop of ``plan``'s kernel, (its coefficient in the product's flat position,
    its size), when the kernel is pointwise over the product's elements and reads each at
    the element its loops are at (checked at ``position``, the product's flat position in any
    variables; neutral ones if None); else None."""
    kernel = plan.kernel
    if plan.local or any(seg.inner for seg in plan.segments):
        return None
    if any(n.is_reduction or n.is_scatter for n in kernel.nodes):
        return None
    product = template.extern
    if math.prod(kernel.outer) != math.prod(product.layout.size):
        return None
    bodies = [plan.body(n) for n in kernel.nodes]
    offsets = [i for body in bodies for _, i in body.loads()] + [b.store.args[1] for b in bodies]
    if any(i.bounds()[1] >= MAX_ELEMENTS for i in offsets):  # the template's offsets are 32-bit
        return None
    reads = [i for body in bodies for name, i in body.loads() if name == product.name]
    first = reads[0]
    if first.const or any(not isinstance(atom, Var) for atom, _ in first.terms):
        return None
    outer = kernel_vars(OUTER, kernel.outer)
    radix = tuple(
        (first.coefficient(v.single_atom()) if size != 1 else 1, size)
        for v, size in zip(outer, kernel.outer, strict=True)
    )
    if any(c <= 0 for c, _ in radix):
        return None
    if position is None:
        batch, m, n, _ = template.sizes()
        position = template.product_index(
            *(Expr.of(Var(name, s)) for name, s in (("batch", batch), ("row", m), ("col", n)))
        )
    values = dataclasses.replace(template, radix=radix).epilogue_vars(position)
    mapping = {v.single_atom(): e for v, e in zip(outer, values) if v.single_atom() is not None}
    if any(index.subs(mapping) != position for index in reads):
        return None
    return radix


def _reads(step) -> set[str]:
    if isinstance(step, FusedKernel):
        return {name for n in step.nodes for name in n.read_names()}
    return {v.buffer.name for v in step.kernel.tensor_args()}


def _no_writes_between(steps: list, start: int, end: int) -> bool:
    """Whether no step between ``start`` and ``end`` writes in place (an in-place aten call,
    a scatter): moving the matmul past them could change what it reads."""
    for step in steps[start + 1 : end]:
        if isinstance(step, ExternStep) and step.kernel.mutates:
            return False
        if isinstance(step, FusedKernel) and any(n.is_scatter for n in step.nodes):
            return False
    return True
