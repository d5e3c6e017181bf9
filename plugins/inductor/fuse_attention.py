"""Explicit attention rewritten into one ``scaled_dot_product_attention`` call.

Models that write attention out by hand::

    att = (q @ k.transpose(-2, -1)) * scale        # or / d, or no scale; matmul or bmm
    att = att.masked_fill(~keep, float("-inf"))    # or where(keep, att, -inf), or + bias, or none
    att = F.softmax(att, dim=-1)                   # maybe in float32, cast back
    y = att @ v                                    # maybe through inactive dropout

materialize the ``... x L x S`` scores, and keep them for the backward. One SDPA call runs
the fused kernels instead: flash or memory-efficient attention on the GPU, the flash kernel
on the CPU (the AOT layer keeps both whole and they run as aten calls). The pass rewrites the
torch-level graph as the AOT layer's ``graph_pass``, before it traces: autograd of SDPA
gives the backward, and a plan loaded from the plan cache needs no pass.

A match is rewritten only where SDPA computes what the ops did:

* q, k^T and v are 3-D or 4-D, non-empty, of one floating dtype and device, with equal
  batch dimensions (no broadcasting between them); 3-D ones run as a batch of one;
* the scale is a product of positive Python numbers (SDPA's ``scale=``), applied before
  an additive mask; an additive mask has the inputs' dtype and a boolean one fills ``-inf``;
* softmax runs over the last dimension, in the inputs' dtype or in float32 (half-precision
  inputs) cast back; dropout on the weights is inactive (``p == 0`` or not training): an
  active one keeps the graph, whose random numbers are eager's;
* no value of the chain but the output is used elsewhere, and nothing between its first
  and last op writes to a tensor or switches grad mode or autocast;
* float32 on CUDA only with TF32 matmuls allowed, as the fused kernels use TF32.

Rows that mask every key: eager's softmax gives NaN there, SDPA 0 on the CPU and other
numbers on CUDA (the memory-efficient kernel, torch 2.11). The rewrite puts the NaN back (a
``where`` over the output, from whether the row keeps any key), so outputs match; gradients
do not: eager's are NaN (v's, across that batch and head), the rewrite's finite. torch's
inductor rewrites masks without the ``where``. Half-precision results match eager's within
rounding: SDPA keeps the scores in float32 where eager rounds them.

Option ``fuse_attention`` (default True) turns the pass off; each rewrite (per traced plan)
adds one to ``torchkiln.counters["inductor"]["fuse_attention"]`` and is logged under
``TORCHKILN_LOGS=output_code``, with why an attention-shaped chain was kept.
"""

from __future__ import annotations

import inspect
import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.fx import GraphModule, Interpreter, Node

from torchkiln import counters, logs

#: Families of the ops a chain is made of, by call_function target or call_method name.
_FAMILIES: dict[Any, str] = {
    operator.matmul: "matmul",
    torch.matmul: "matmul",
    torch.bmm: "matmul",
    "matmul": "matmul",
    "bmm": "matmul",
    operator.mul: "mul",
    torch.mul: "mul",
    "mul": "mul",
    operator.truediv: "div",
    torch.div: "div",
    torch.true_divide: "div",
    "div": "div",
    "true_divide": "div",
    operator.add: "add",
    torch.add: "add",
    "add": "add",
    torch.masked_fill: "masked_fill",
    "masked_fill": "masked_fill",
    torch.where: "where",
    "where": "where",
    F.softmax: "softmax",
    torch.softmax: "softmax",
    "softmax": "softmax",
    F.dropout: "dropout",
    torch.dropout: "dropout",
    "float": "cast",
    "half": "cast",
    "bfloat16": "cast",
    "double": "cast",
    "to": "cast",
    "type": "cast",
    "type_as": "cast",
    operator.invert: "not",
    torch.logical_not: "not",
    torch.bitwise_not: "not",
    "logical_not": "not",
    "bitwise_not": "not",
    torch.transpose: "transpose",
    torch.swapaxes: "transpose",
    torch.swapdims: "transpose",
    "transpose": "transpose",
    "swapaxes": "transpose",
    "swapdims": "transpose",
}

#: Parameter names, positional first, per family (casts are read from their values).
_PARAMETERS = {
    "matmul": ("input", "other"),
    "mul": ("input", "other"),
    "div": ("input", "other", "rounding_mode"),
    "add": ("input", "other", "alpha"),
    "masked_fill": ("input", "mask", "value"),
    "where": ("condition", "input", "other"),
    "softmax": ("input", "dim", "dtype"),
    "dropout": ("input", "p", "training", "inplace"),
    "not": ("input",),
    "transpose": ("input", "dim0", "dim1"),
}
#: Targets whose parameters differ from their family's.
_TARGET_PARAMETERS = {
    "where": ("input", "condition", "other"),  # x.where(cond, y) is torch.where(cond, x, y)
    F.softmax: ("input", "dim", "_stacklevel", "dtype"),
    torch.dropout: ("input", "p", "training"),
}

_INPLACE_OPERATORS = frozenset(
    {
        operator.setitem,
        operator.delitem,
        operator.iadd,
        operator.isub,
        operator.imul,
        operator.itruediv,
        operator.ifloordiv,
        operator.imod,
        operator.ipow,
        operator.imatmul,
        operator.iand,
        operator.ior,
        operator.ixor,
        operator.ilshift,
        operator.irshift,
    }
)
_INPLACE_DUNDERS = frozenset(
    {"__setitem__", "__delitem__"}
    | {f"__i{name}__" for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow")}
    | {f"__i{name}__" for name in ("matmul", "and", "or", "xor", "lshift", "rshift")}
)

#: What SDPA takes (float32 inputs' scores may not go through another dtype).
_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})

#: The longest chain of scale, mask and cast steps between q @ k^T and the softmax
#: (and of casts and dropouts after it) that the pass follows.
_MAX_STEPS = 8


@dataclass
class _Attention:
    """One match: the ops from ``q @ k^T`` to ``att @ v``, and what SDPA needs instead."""

    nodes: list[Node]  # q @ k^T first, att @ v last
    query: Node
    key_t: Node
    key: Node | None  # k, where k^T is a transpose of it
    value: Node
    scale: float
    mask: Node | None
    #: "bias" (added to the scores), "keep" (boolean, True attends) or "drop" (True masks)
    mask_kind: str | None
    batched: bool  # 4-D (else 3-D: run as a batch of one)
    leftovers: tuple[Node | None, ...]  # k^T and the mask as the graph had them: erased if dead


def fuse_attention(
    gm: GraphModule, example_inputs: Sequence[Any], *, cuda_tf32: bool
) -> GraphModule:
    """``gm`` with each explicit attention replaced by SDPA, in a copy (``gm`` stays as
    captured: plans are keyed by it), or ``gm`` itself where it has none. ``cuda_tf32``:
    whether float32 matmuls on CUDA may use TF32 (``torch.backends.cuda.matmul.allow_tf32``)."""
    if not any(_family(node) == "softmax" for node in gm.graph.nodes):
        return gm
    copy = GraphModule(gm, _copied_graph(gm))
    copy.meta.update(gm.meta)
    values = _Values(copy, example_inputs)
    matches = []
    for node in copy.graph.nodes:
        found = _match(node, values, cuda_tf32) if _family(node) == "softmax" else None
        if isinstance(found, str):
            logs.artifact("output_code", "attention at %s kept explicit: %s", node.name, found)
        elif found is not None:
            matches.append(found)
    if not matches:
        return gm
    for match in matches:
        sdpa = _rewrite(match)
        logs.artifact(
            "output_code",
            "attention %s ... %s fused into %s (scale=%g, mask=%s)",
            match.nodes[0].name,
            match.nodes[-1].name,
            sdpa.name,
            match.scale,
            match.mask_kind,
        )
    counters["inductor"]["fuse_attention"] += len(matches)
    copy.graph.lint()
    copy.recompile()
    return copy


def _copied_graph(gm: GraphModule) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return graph


# -- reading nodes ----------------------------------------------------------------------


def _family(node: Node) -> str | None:
    if node.op not in ("call_function", "call_method"):
        return None
    try:
        return _FAMILIES.get(node.target)
    except TypeError:  # an unhashable target
        return None


def _bind(node: Node) -> tuple[str, dict[str, Any]] | None:
    """The node's family and its arguments by parameter name; None if the pass does not
    read it (another op, or arguments it does not know: ``out=``, say)."""
    family = _family(node)
    if family is None:
        return None
    if family == "cast":
        return (family, {"input": node.args[0]}) if node.args else None
    names = _TARGET_PARAMETERS.get(node.target, _PARAMETERS[family])
    if len(node.args) > len(names) or not set(node.kwargs) <= set(names):
        return None
    return family, {**dict(zip(names, node.args)), **node.kwargs}


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _is_minus_inf(value: Any) -> bool:
    number = _number(value)
    return number is not None and number == -math.inf


def _dropout_active(args: dict[str, Any]) -> bool:
    p, training = args.get("p", 0.5), args.get("training", True)
    return not (_number(p) == 0.0 or training is False)


def _is_pure(node: Node) -> bool:
    bound = _bind(node)
    return bound is not None and not (bound[0] == "dropout" and _dropout_active(bound[1]))


def _is_dead(node: Node) -> bool:
    """A pure op whose result nothing live reads: what capture leaves of no-op casts and
    inactive dropout."""
    return _is_pure(node) and all(_is_dead(user) for user in node.users)


def _live_users(node: Node) -> list[Node]:
    return [user for user in node.users if not _is_dead(user)]


def _switches_state(node: Node) -> bool:
    """Whether ``node`` switches grad mode or autocast (capture's switch is torchkiln's)."""
    return node.op == "call_function" and (
        node.target is torch._C._set_grad_enabled
        or (getattr(node.target, "__module__", None) or "").startswith("torchkiln")
    )


def _mutates_or_switches_state(node: Node) -> bool:
    """Whether running ``node`` may write to a tensor or change grad mode or autocast."""
    if node.op == "call_module" or _switches_state(node):
        return True
    if node.op == "call_method":
        name = node.target
        return (name.endswith("_") and not name.startswith("__")) or name in _INPLACE_DUNDERS
    if node.op != "call_function":
        return False
    target = node.target
    if target in _INPLACE_OPERATORS:
        return True
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return True
    name = getattr(target, "__name__", "")
    return (name.endswith("_") and not name.startswith("__")) or _writes_argument(node)


def _writes_argument(node: Node) -> bool:
    """``out=`` or ``inplace=True`` (``F.relu(x, True)`` too)."""
    if "out" in node.kwargs or node.kwargs.get("inplace"):
        return True
    if not inspect.isfunction(node.target):
        return False
    names = list(inspect.signature(node.target).parameters)
    position = names.index("inplace") if "inplace" in names else len(node.args)
    return position < len(node.args) and bool(node.args[position])


# -- example values -----------------------------------------------------------------------


class _Values:
    """Each node's example value: capture's ``example_value``, or, for a graph without
    them (a static copy of a symbolic graph, a capture loaded from disk), one fake run of
    the whole graph, made at the first miss."""

    def __init__(self, gm: GraphModule, example_inputs: Sequence[Any]):
        self.gm = gm
        self.example_inputs = example_inputs
        self.ran: dict[Node, Any] | None = None

    def __getitem__(self, node: Node) -> Any:
        if "example_value" in node.meta:
            return node.meta["example_value"]
        if self.ran is None:
            self.ran = _fake_run(self.gm, self.example_inputs)
        return self.ran.get(node)


def _fake_run(gm: GraphModule, example_inputs: Sequence[Any]) -> dict[Node, Any]:
    """Every node's value on fake copies of ``example_inputs``; none where the graph switches
    global state (the run would leave it switched if it failed) or fake tensors cannot run
    it (data-dependent ops)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    if any(_switches_state(node) for node in gm.graph.nodes):
        return {}
    fakes = [x for x in example_inputs if isinstance(x, FakeTensor)]
    mode = fakes[0].fake_mode if fakes else FakeTensorMode(allow_non_fake_inputs=True)
    inputs = [
        mode.from_tensor(x) if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) else x
        for x in example_inputs
    ]
    interpreter = Interpreter(gm, garbage_collect_values=False)
    try:
        with mode, torch.no_grad():
            interpreter.run(*inputs)
    except Exception as e:  # any failure only means: no rewrite
        logs.artifact("output_code", "attention not fused: the graph's fake run failed: %s", e)
        return {}
    return interpreter.env


def _static_shape(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, torch.Tensor):
        return None
    shape = tuple(value.shape)
    return shape if all(isinstance(s, int) for s in shape) else None


# -- matching -----------------------------------------------------------------------------

_Step = tuple[Node, str, dict[str, Any]]


def _scores_steps(node: Node, depth: int = 0) -> list[_Step] | None:
    """The steps from a ``q @ k^T`` matmul to ``node`` through scale, mask and cast ops,
    first to last; None if ``node`` is not reached so."""
    bound = _bind(node)
    if bound is None or depth > _MAX_STEPS:
        return None
    family, args = bound
    if family == "matmul":
        return [(node, family, args)]
    operands = {
        "mul": ("input", "other"),
        "div": ("input",),
        "add": ("input", "other"),
        "masked_fill": ("input",),
        "where": ("input", "other"),
        "cast": ("input",),
    }.get(family, ())
    for name in operands:
        operand = args.get(name)
        steps = _scores_steps(operand, depth + 1) if isinstance(operand, Node) else None
        if steps is not None:
            return [*steps, (node, family, args)]
    return None


def _weights_steps(softmax: Node) -> list[_Step] | None:
    """The steps from ``softmax`` to the ``att @ v`` matmul through casts and dropouts;
    None if there is no such matmul."""
    steps: list[_Step] = []
    node = softmax
    for _ in range(_MAX_STEPS):
        step = None
        for user in _live_users(node):
            bound = _bind(user)
            if (
                bound
                and bound[0] in ("cast", "dropout", "matmul")
                and bound[1].get("input") is node
            ):
                step = (user, *bound)
                break
        if step is None:
            return None
        steps.append(step)
        if step[1] == "matmul":
            return steps
        node = step[0]
    return None


def _match(softmax: Node, values: _Values, cuda_tf32: bool) -> _Attention | str | None:
    """The attention around ``softmax``; why it is kept explicit (a string) where the ops
    are attention-shaped but SDPA would compute something else; None where they are not."""
    bound = _bind(softmax)
    if bound is None or not isinstance(bound[1].get("input"), Node):
        return None
    scores = _scores_steps(bound[1]["input"])
    weights = _weights_steps(softmax)
    if scores is None or weights is None:
        return None
    steps = [*scores, (softmax, *bound), *weights]
    nodes = [node for node, _, _ in steps]
    if not _live_users(nodes[-1]):
        return None
    for node, successor in itertools.pairwise(nodes):
        if _live_users(node) != [successor]:
            return f"{node.name} is also used outside the attention"
    found = _scale_and_mask(scores)
    if isinstance(found, str):
        return found
    scale, mask, mask_kind = found
    first, final = steps[0][2], steps[-1][2]
    query, key_t, value = first.get("input"), first.get("other"), final.get("other")
    for name, operand in (("q", query), ("k^T", key_t), ("v", value), ("the mask", mask)):
        if operand in nodes or not (isinstance(operand, Node) or name == "the mask"):
            return f"{name} is not a tensor from outside the attention"
    reason = (
        _check_values(steps, query, key_t, value, mask, mask_kind, values, cuda_tf32)
        or _check_weights(steps[len(scores) :], len(_static_shape(values[query])))
        or _check_between(nodes)
    )
    if reason is not None:
        return reason
    leftovers = (key_t, mask)
    if mask_kind == "drop" and (kept := _negated(mask, values)) is not None:
        mask, mask_kind = kept, "keep"
    return _Attention(
        nodes,
        query,
        key_t,
        _untransposed(key_t, values),
        value,
        scale,
        mask,
        mask_kind,
        batched=len(_static_shape(values[query])) == 4,
        leftovers=leftovers,
    )


def _scale_and_mask(scores: list[_Step]) -> tuple[float, Node | None, str | None] | str:
    """The scale, mask and mask kind of the steps from ``q @ k^T`` to the softmax."""
    scale, mask, kind = 1.0, None, None
    for (previous, _, _), (node, family, args) in itertools.pairwise(scores):
        if family in ("mul", "div"):
            operand = args.get("other") if args.get("input") is previous else args.get("input")
            factor = _number(operand)
            if factor is None or not (0 < factor < math.inf):
                return f"{node.name} scales by {operand!r}, not a positive number"
            if args.get("rounding_mode") is not None:
                return f"{node.name} rounds"
            if kind == "bias":
                return f"{node.name} scales the additive mask too"
            scale = scale * factor if family == "mul" else scale / factor
        elif family in ("add", "masked_fill", "where"):
            if mask is not None:
                return f"{node.name} masks a second time"
            if family == "add":
                mask = args.get("other") if args.get("input") is previous else args.get("input")
                kind = "bias"
                if _number(args.get("alpha", 1)) != 1.0:
                    return f"{node.name} scales the mask by alpha"
            elif family == "masked_fill":
                mask, kind = args.get("mask"), "drop"
                if not _is_minus_inf(args.get("value")):
                    return f"{node.name} fills {args.get('value')!r}, not -inf"
            else:
                mask = args.get("condition")
                kind = "keep" if args.get("input") is previous else "drop"
                fill = args.get("other") if kind == "keep" else args.get("input")
                if not _is_minus_inf(fill):
                    return f"{node.name} fills {fill!r}, not -inf"
            if not isinstance(mask, Node):
                return f"{node.name} masks with {mask!r}, not a tensor"
    return scale, mask, kind


def _check_values(
    steps: list[_Step],
    query: Node,
    key_t: Node,
    value: Node,
    mask: Node | None,
    mask_kind: str | None,
    values: _Values,
    cuda_tf32: bool,
) -> str | None:
    """Why the example values say SDPA would compute something else, or None."""
    q, k_t, v = values[query], values[key_t], values[value]
    shapes = [_static_shape(x) for x in (q, k_t, v)]
    if any(shape is None for shape in shapes):
        return "no static example values of q, k and v"
    q_shape, k_shape, v_shape = shapes
    if len(q_shape) not in (3, 4) or not len(q_shape) == len(k_shape) == len(v_shape):
        return f"q, k^T and v are {len(q_shape)}-D, {len(k_shape)}-D, {len(v_shape)}-D"
    if not q_shape[:-2] == k_shape[:-2] == v_shape[:-2]:
        return "q, k^T and v broadcast their batch dimensions"
    if 0 in q_shape + k_shape + v_shape:
        return "an empty tensor"
    dtype = q.dtype
    if dtype not in _DTYPES or not dtype == k_t.dtype == v.dtype:
        return f"q, k and v are {q.dtype}, {k_t.dtype}, {v.dtype}"
    if not q.device == k_t.device == v.device:
        return "q, k and v are on several devices"
    if q.device.type == "cuda" and dtype == torch.float32 and not cuda_tf32:
        return "float32 on CUDA with TF32 matmuls off (the fused kernels use TF32)"
    allowed = {dtype} if dtype == torch.float64 else {dtype, torch.float32}
    scores_shape = (*q_shape[:-1], k_shape[-1])
    for node, _, _ in steps:
        x = values[node]
        expected = (*q_shape[:-1], v_shape[-1]) if node is steps[-1][0] else scores_shape
        if _static_shape(x) != expected:
            return f"{node.name} is of shape {_static_shape(x)}, not {expected}"
        if x.dtype not in allowed or x.device != q.device:
            return f"{node.name} is {x.dtype} on {x.device}"
    if values[steps[-1][0]].dtype != dtype:
        return f"the attention's output is not {dtype}"
    if mask is not None:
        m = values[mask]
        if not isinstance(m, torch.Tensor) or m.device != q.device:
            return "the mask is not a tensor on q's device"
        if mask_kind == "bias":
            added = next(node for node, family, _ in steps if family == "add")
            if m.dtype != dtype or values[added].dtype != dtype:
                return f"an additive mask of {m.dtype} added to {values[added].dtype} scores"
        elif m.dtype != torch.bool:
            return f"a {m.dtype} mask fills -inf"
    return None


def _check_weights(steps: list[_Step], ndim: int) -> str | None:
    """Why the softmax (first of ``steps``) and what follows it are not SDPA's, or None."""
    softmax, _, args = steps[0]
    dim = args.get("dim")
    if not isinstance(dim, int) or dim % ndim != ndim - 1:
        return f"{softmax.name} is not over the last dimension"
    for node, family, step_args in steps[1:]:
        if family == "dropout" and _dropout_active(step_args):
            return f"{node.name} is an active dropout"
    return None


def _check_between(nodes: list[Node]) -> str | None:
    """Why SDPA cannot read q, k^T and the mask where the attention's last op runs: an op
    between its first and last may write to them or switch grad mode or autocast."""
    node = nodes[0].next
    while node is not nodes[-1]:
        if node not in nodes and _mutates_or_switches_state(node):
            return f"{node.name} may write to a tensor or switch global state"
        node = node.next
    return None


# -- rewriting ---------------------------------------------------------------------------


def _rewrite(match: _Attention) -> Node:
    """Put SDPA (and what restores eager's NaN rows) before the last op; returns the SDPA
    node."""
    final = match.nodes[-1]
    graph = final.graph
    with graph.inserting_before(final):
        key = match.key or graph.call_method("transpose", (match.key_t, -2, -1))
        qkv = (match.query, key, match.value)
        if not match.batched:
            qkv = tuple(graph.call_method("unsqueeze", (x, 0)) for x in qkv)
        attn_mask = match.mask
        if match.mask_kind == "drop":
            attn_mask = graph.call_function(torch.logical_not, (match.mask,))
        sdpa = graph.call_function(
            F.scaled_dot_product_attention,
            qkv,
            {"attn_mask": attn_mask, "dropout_p": 0.0, "is_causal": False, "scale": match.scale},
        )
        out = sdpa if match.batched else graph.call_method("squeeze", (sdpa, 0))
        if match.mask is not None:
            kept = attn_mask
            if match.mask_kind == "bias":
                kept = graph.call_function(operator.ne, (match.mask, -math.inf))
            any_kept = graph.call_method("any", (kept, -1), {"keepdim": True})
            out = graph.call_function(torch.where, (any_kept, out, math.nan))
    final.replace_all_uses_with(out)
    for node in reversed(match.nodes):
        _erase_with_users(node)
    for leftover in match.leftovers:
        if leftover is not None and _is_dead(leftover):
            _erase_with_users(leftover)
    return sdpa


def _untransposed(node: Node, values: _Values) -> Node | None:
    """``x`` where ``node`` is ``x`` with its last two dimensions swapped."""
    if node.op == "call_function" and node.target is getattr and node.args[1:] == ("mT",):
        return node.args[0]
    bound = _bind(node)
    if bound is None or bound[0] != "transpose":
        return None
    ndim = len(_static_shape(values[node]) or ())
    dims = {bound[1].get("dim0"), bound[1].get("dim1")}
    return bound[1]["input"] if dims in ({-2, -1}, {ndim - 2, ndim - 1}) else None


def _negated(mask: Node, values: _Values) -> Node | None:
    """``m`` where ``mask`` is ``~m`` of a boolean ``m``."""
    bound = _bind(mask)
    if bound is None or bound[0] != "not" or not isinstance(bound[1]["input"], Node):
        return None
    inner = bound[1]["input"]
    value = values[inner]
    return inner if isinstance(value, torch.Tensor) and value.dtype == torch.bool else None


def _erase_with_users(node: Node) -> None:
    while node.users:  # a user may be another's user too: erased with it
        _erase_with_users(next(iter(node.users)))
    node.graph.erase_node(node)
