"""Which matmuls run as templates, and which pointwise kernel each one's store takes in.

With ``max_autotune_gemm`` (or ``max_autotune``) on the Triton target, every aten ``mm``,
``addmm`` and ``bmm`` call of the schedule whose operands a template handles (float32,
float16 or bfloat16, any strides, fewer than 2**31 elements) becomes a :class:`TemplateStep`:
a choice, measured at its first call, between the template in each of its block configs with
the epilogue fused into its store, and the aten call followed by the epilogue as its own kernel
(:mod:`.codegen.triton_templates`, :mod:`.autotune.gemm`).

The epilogue is the first step that reads the product, when it is a kernel pointwise over the
product's own elements: its outer loops enumerate them and every read of the product is at
the element the loops are at (bias add, activation, residual add, cast, scaling). Its loop
variables are then functions of the product's flat position, found by inverting that read
(``o_i = (position // coefficient_i) % size_i``) and checked by substituting them back. The
step takes the epilogue's place in the schedule, and stores the product too when anything
else reads it (a graph output, a later step: the backward's saved value). A first reader that
reduces, reads the product at other elements or loops over another space stays a kernel of
its own; the template then stores the product where the aten call did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .indexing import Expr, Var
from .ir import ExternKernel, Layout, StorageView
from .kernel_plan import KernelPlan
from .scheduler import OUTER, ExternStep, FusedKernel, Schedule, kernel_vars

_aten = torch.ops.aten
#: the aten matmuls a template computes, by name
GEMM_OPS = {_aten.mm.default: "mm", _aten.addmm.default: "addmm", _aten.bmm.default: "bmm"}
#: operand dtypes (``tl.dot`` accumulates them in float32)
TEMPLATE_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
#: templates index with 32-bit offsets: larger buffers stay aten calls
MAX_ELEMENTS = 2**31


@dataclass
class TemplateStep:
    """The matmul ``extern`` computed by a template, ``epilogue`` (a pointwise kernel's plan,
    or None) fused into its store; ``radix``: per outer loop of the epilogue, its coefficient
    in the product's flat position and its size."""

    name: str
    extern: ExternKernel
    epilogue: KernelPlan | None
    store_product: bool
    radix: tuple[tuple[int, int], ...] = ()

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

    def product_index(self, batch: Expr, row: Expr, col: Expr) -> Expr:
        """Where element (``batch``, ``row``, ``col``) of the product is in its buffer."""
        layout: Layout = self.extern.layout
        return layout.index([batch, row, col] if self.op == "bmm" else [row, col])

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


def plan_templates(
    schedule: Schedule, plans: dict[str, KernelPlan], output_names: set[str]
) -> list[TemplateStep]:
    """Replace each templatable matmul of ``schedule.steps`` by a :class:`TemplateStep` (at
    its epilogue's place when one fuses) and return them."""
    steps = schedule.steps
    reads = [_reads(step) for step in steps]
    placed: dict[int, TemplateStep] = {}  # position -> the template that runs there
    moved: set[int] = set()  # positions of matmuls whose template runs at their epilogue
    for i, step in enumerate(steps):
        if not (isinstance(step, ExternStep) and templatable(step.kernel)):
            continue
        product = step.kernel
        readers = [j for j in range(i + 1, len(steps)) if product.name in reads[j]]
        template = TemplateStep(f"template{len(placed)}", product, None, True)
        at = i
        if readers and readers[0] not in placed and _no_writes_between(steps, i, readers[0]):
            kernel = steps[readers[0]]
            plan = plans.get(getattr(kernel, "name", ""))
            radix = epilogue_radix(plan, template) if plan is not None else None
            if radix is not None:
                others = len(readers) > 1 or product.name in output_names
                template = TemplateStep(template.name, product, plan, others, radix)
                at = readers[0]
                moved.add(i)
        placed[at] = template
    schedule.steps = [placed.get(j, s) for j, s in enumerate(steps) if j not in moved]
    return list(placed.values())


def templatable(ext: ExternKernel) -> bool:
    """Whether a template computes this aten call: a matmul of float operands of one dtype,
    none empty or too large for 32-bit offsets, addmm's scales numbers."""
    if ext.op not in GEMM_OPS or ext.layout is None:
        return False
    if any(arg.kind != "tensor" for arg in ext.args):
        return False
    if set(ext.kwargs) - {"alpha", "beta"}:
        return False
    if any(not isinstance(arg.value, (int, float)) for arg in ext.kwargs.values()):
        return False
    views = [arg.value for arg in ext.args]
    dtype = ext.layout.dtype
    if dtype not in TEMPLATE_DTYPES or any(v.dtype != dtype for v in views):
        return False
    layouts = [v.buffer.layout for v in views] + [ext.layout]
    if any(lay.storage_numel() >= MAX_ELEMENTS for lay in layouts):
        return False
    return all(s > 0 for v in views for s in v.size)


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
    values = TemplateStep("", product, plan, False, radix).epilogue_vars(position)
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
