"""An attention mask computed from sizes alone becomes ``is_causal=True``, or no mask.

Under compilation (``torch.compiler.is_compiling()``) Hugging Face ``transformers``
builds the causal mask it skips in eager code, where it calls
``scaled_dot_product_attention(..., is_causal=True)``: ``arange``s, comparisons and an
``expand``. Given a mask, SDPA can't use its causal kernels: Llama on an H200 ran its
attention at 263 us a step against eager's 118, plus the mask's own kernels.

When a mask's value depends on nothing but constants (no graph input, nothing random),
the capture computes it once (its ops, and the writes into its memory before the
attention reads it), and if it is exactly the causal pattern (``tril`` of
queries by keys; ``True``/``0`` where attended, ``False``/``-inf``/the dtype's lowest
value where not) it drops the mask and sets ``is_causal=True``: the same attention,
through the kernels eager uses. A mask that attends everywhere (BERT's, from the
``attention_mask`` of ones it makes when none is passed) is dropped.

With symbolic sizes the mask may also read the inputs' sizes (``arange(x.shape[1])``):
its value is then a function of those sizes, computed for the capture's sizes, and the
entry is guarded by a :class:`SizedMask` that computes it again for each new set of
sizes (once: the answers are kept) and passes only where it has the same pattern.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from torchkiln import effects
from torchkiln.capture.aliasing import storage_id

if TYPE_CHECKING:  # sympy stays unimported where no size is symbolic (a warm start's first call)
    import sympy

    from torchkiln.capture.symbolic import ShapeGuards

#: the mask's elements at most (it is computed once, at compile time)
MAX_MASK_NUMEL = 1 << 24
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")


def use_is_causal(
    graph: fx.Graph, writers: Mapping[int, list[fx.Node]], shapes: ShapeGuards | None = None
) -> None:
    """Replace each causal mask computed from constants (and, with ``shapes``, the inputs'
    sizes) by ``is_causal=True``, and each that attends everywhere by no mask, in place;
    ``writers``: the nodes that write into each storage (``mask &= ...``), whose writes
    before the attention are part of the mask's value and after it are not; ``shapes``:
    the capture's symbolic sizes, which a mask of sizes adds its guard to."""
    order = {node: k for k, node in enumerate(graph.nodes)}
    computed: set[fx.Node] = set()  # the nodes making the masks dropped
    guarded: set[tuple] = set()  # one guard for a mask of sizes that layers share
    for node in graph.find_nodes(op="call_function", target=F.scaled_dot_product_attention):
        params = dict(zip(_SDPA_PARAMS, node.args)) | node.kwargs
        mask = params.get("attn_mask")
        if not isinstance(mask, fx.Node) or params.get("is_causal", False):
            continue
        found = _computing(mask, order[node], order, writers)
        if found is None:
            continue
        needed, sizes = found
        lengths = [params[p].meta["example_value"].shape[-2] for p in ("query", "key")]
        sized = SizedMask(needed, sizes, mask, lengths)
        if sized.symbols and (shapes is None or not sized.symbols <= shapes.sizes.keys()):
            continue  # sizes no input gives: nothing to guard with
        pattern = sized.pattern_at(sized.capture_values())
        if pattern is None:
            continue
        shared = (mask, *map(str, lengths))  # the same mask at the same lengths
        if sized.symbols and shared not in guarded:
            guarded.add(shared)
            sized.expected = pattern
            description = f"the attention mask of {node} is {pattern} at these sizes"
            shapes.predicates.append((sized, sorted(sized.symbols, key=str), description))
        node.args = tuple(params.pop(p) for p in _SDPA_PARAMS[:3])
        node.kwargs = {**params, "attn_mask": None, "is_causal": pattern == "causal"}
        computed |= needed
    _erase_unread(graph, computed, writers)


class SizedMask:
    """A mask's ops as a function of the sizes they read: its pattern at any sizes.

    Called with the values of its ``symbols`` (in the order of their names), it answers
    whether the mask has the ``expected`` pattern at those sizes; each answer is kept.
    """

    def __init__(
        self, needed: set[fx.Node], sizes: set[fx.Node], mask: fx.Node, lengths: list[Any]
    ):
        sub = fx.Graph()
        copies: dict[fx.Node, fx.Node] = {}
        self.sizes: list[Any] = []  # each size read's value, symbolic where it varies
        for node in mask.graph.nodes:
            if node in sizes:
                copies[node] = sub.placeholder(node.name)
                self.sizes.append(node.meta["example_value"])
            elif node in needed:
                copies[node] = sub.node_copy(node, lambda n: copies[n])
        sub.output(copies[mask])
        self.module = fx.GraphModule(torch.nn.Module(), sub)
        self.lengths = lengths  # the queries' and the keys' lengths
        self.symbols: set[sympy.Symbol] = set()
        for item in self._symbolic_sizes():
            self.symbols |= item.node.expr.free_symbols
        self.expected: str | None = None
        self.answers: dict[tuple[int, ...], bool] = {}

    def capture_values(self) -> dict[sympy.Symbol, int]:
        """The symbols' values at the sizes the capture traced (their hints)."""
        values: dict[sympy.Symbol, int] = {}
        for item in self._symbolic_sizes():
            hint = item.node.shape_env.backed_var_to_val
            values.update({s: int(hint[s]) for s in item.node.expr.free_symbols})
        return values

    def _symbolic_sizes(self) -> list[torch.SymInt]:
        """The SymInts among the size reads' values and the attention's lengths."""
        items = []
        for value in [*self.sizes, *self.lengths]:
            items += value if isinstance(value, (tuple, list)) else (value,)
        return [item for item in items if isinstance(item, torch.SymInt)]

    def pattern_at(self, values: Mapping[sympy.Symbol, int]) -> str | None:
        """``"causal"``, ``"full"`` or None: the mask's pattern when the symbols have ``values``."""
        args = [_concrete(size, values) for size in self.sizes]
        queries, keys = (_concrete(n, values) for n in self.lengths)
        with torch.no_grad():
            value = self.module(*args)
        return _pattern(value, queries, keys) if isinstance(value, torch.Tensor) else None

    def __call__(self, *values: int) -> bool:
        answer = self.answers.get(values)
        if answer is None:
            symbols = sorted(self.symbols, key=str)
            try:
                answer = self.pattern_at(dict(zip(symbols, values))) == self.expected
            except Exception:  # the mask's ops fail at these sizes: the graph is not for them
                answer = False
            if len(self.answers) >= MAX_ANSWERS:
                self.answers.clear()
            self.answers[values] = answer
        return answer


#: sets of sizes a ``SizedMask`` keeps its answer for (then it starts over)
MAX_ANSWERS = 4096


def _concrete(value: Any, values: Mapping[sympy.Symbol, int]) -> Any:
    """``value`` (a size or a tuple of sizes) with its symbols given ``values``."""
    if isinstance(value, (tuple, list)):
        return type(value)(_concrete(v, values) for v in value)
    if isinstance(value, torch.SymInt):
        return int(value.node.expr.xreplace(values))
    return value


def _computing(
    mask: fx.Node, position: int, order: dict[fx.Node, int], writers: Mapping[int, list[fx.Node]]
) -> tuple[set[fx.Node], set[fx.Node]] | None:
    """The nodes making ``mask``'s value where the node at ``position`` reads it, where
    constants and the sizes of tensors alone make it (else None): its ops, the writes into
    its memory before ``position``, and the reads of sizes among them (the second set)."""
    example = mask.meta.get("example_value")
    if not isinstance(example, torch.Tensor):
        return None
    # the capture's size (its hint), not a guard on the sizes: each size's is computed once
    numel = example.numel()
    numel = numel.node.hint if isinstance(numel, torch.SymInt) else numel
    if numel is None or numel > MAX_MASK_NUMEL:
        return None
    needed: set[fx.Node] = set()
    sizes: set[fx.Node] = set()
    stack = [mask]
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        if _reads_sizes(node):
            needed.add(node)
            sizes.add(node)
            continue
        if node.op not in ("call_function", "call_method") or _may_vary(node):
            return None
        needed.add(node)
        stack.extend(node.all_input_nodes)
        example = node.meta.get("example_value")
        if isinstance(example, torch.Tensor):
            written_by = writers.get(storage_id(example), ())
            stack.extend(w for w in written_by if order.get(w, position) < position)
    return needed, sizes


#: size arithmetic between size reads (``x.shape[1] * 2``)
_SIZE_ARITHMETIC = frozenset(
    {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg}
)


def _reads_sizes(node: fx.Node) -> bool:
    """Whether ``node`` gives an int or a tuple of ints that is a tensor's sizes (``x.size()``,
    ``x.shape[1]``, ``x.size(0) * 2``): a value that the inputs' sizes alone fix."""
    example = node.meta.get("example_value")
    items = example if isinstance(example, (tuple, list)) else (example,)
    if not items or not all(type(i) in (int, torch.SymInt) for i in items):
        return False
    if node.op == "call_method":
        return node.target in ("size", "dim", "numel")
    if node.op != "call_function":
        return False
    if node.target is getattr:
        return node.args[1] == "shape"
    if node.target is operator.getitem:
        return isinstance(node.args[0], fx.Node) and _reads_sizes(node.args[0])
    if node.target in _SIZE_ARITHMETIC:
        return all(_reads_sizes(a) if isinstance(a, fx.Node) else type(a) is int for a in node.args)
    return False


def _erase_unread(
    graph: fx.Graph, candidates: set[fx.Node], writers: Mapping[int, list[fx.Node]]
) -> None:
    """Erase the ``candidates`` nothing reads any more. A write (``mask &= ...``: a node
    nothing uses, its result being its operand) goes once no other node reads the memory
    it writes; fx's dead-code pass would drop writes that others read."""
    written = {w: storage for storage, ws in writers.items() for w in ws}
    erased = True
    while erased:
        erased = False
        for node in reversed(list(graph.nodes)):
            if node not in candidates or node.users or effects.is_impure(node):
                continue
            if node in written and _read_by_others(graph, written[node], writers):
                continue
            graph.erase_node(node)
            candidates.discard(node)
            erased = True


def _read_by_others(graph: fx.Graph, storage: int, writers: Mapping[int, list[fx.Node]]) -> bool:
    """Whether a node other than the writes into ``storage`` takes a view of it as input."""
    own = set(writers.get(storage, ()))
    return any(
        isinstance(arg.meta.get("example_value"), torch.Tensor)
        and storage_id(arg.meta["example_value"]) == storage
        for node in graph.nodes
        if node not in own
        for arg in node.all_input_nodes
    )


def _may_vary(node: fx.Node) -> bool:
    """Whether ``node`` may give another value on another call, sizes aside: random or
    effectful."""
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if _is_random(target):
        return True
    return node.op == "call_function" and effects.has_side_effects(node.target)


#: torch functions and tensor methods that draw random numbers (in-place ones end in "_")
RANDOM_OPS = frozenset(
    {
        "bernoulli", "binomial", "cauchy", "exponential", "geometric", "gumbel_softmax",
        "log_normal", "multinomial", "normal", "poisson", "random", "rrelu",
        "rrelu_with_noise", "sample_dirichlet", "standard_gamma", "uniform",
    }
)  # fmt: skip


def _is_random(name: str) -> bool:
    name = name.strip("_")
    return name in RANDOM_OPS or "rand" in name or "dropout" in name


def _pattern(mask: torch.Tensor, queries: int, keys: int) -> str | None:
    """``"causal"`` where every (queries, keys) slice of ``mask`` attends exactly ``tril``'s
    positions, ``"full"`` where it attends every position, else None."""
    if mask.dim() < 2 or any(s not in (1, n) for s, n in zip(mask.shape[-2:], (queries, keys))):
        return None
    slices = mask.broadcast_to((*mask.shape[:-2], queries, keys)).reshape(-1, queries, keys)
    if mask.dtype == torch.bool:
        attended = slices
    elif mask.is_floating_point():
        blocked = (slices == float("-inf")) | (slices == torch.finfo(mask.dtype).min)
        if not ((slices == 0) | blocked).all():
            return None  # a bias, not a mask
        attended = slices == 0
    else:
        return None
    if attended.all():
        return "full"
    causal = torch.ones(queries, keys, dtype=torch.bool, device=mask.device).tril()
    return "causal" if bool((attended == causal).all()) else None
