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
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.fx as fx
import torch.nn.functional as F

from torchkiln import effects
from torchkiln.capture.aliasing import storage_id

#: the mask's elements at most (it is computed once, at compile time)
MAX_MASK_NUMEL = 1 << 24
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")


def use_is_causal(graph: fx.Graph, writers: Mapping[int, list[fx.Node]]) -> None:
    """Replace each causal mask computed from constants by ``is_causal=True``, and each
    that attends everywhere by no mask, in place;
    ``writers``: the nodes that write into each storage (``mask &= ...``), whose writes
    before the attention are part of the mask's value and after it are not."""
    order = {node: k for k, node in enumerate(graph.nodes)}
    computed: set[fx.Node] = set()  # the nodes making the masks dropped
    for node in graph.find_nodes(op="call_function", target=F.scaled_dot_product_attention):
        params = dict(zip(_SDPA_PARAMS, node.args)) | node.kwargs
        mask = params.get("attn_mask")
        if not isinstance(mask, fx.Node) or params.get("is_causal", False):
            continue
        queries, keys = (params[p].meta["example_value"].shape[-2] for p in ("query", "key"))
        if not isinstance(queries, int) or not isinstance(keys, int):
            continue
        needed = _computing(mask, order[node], order, writers)
        value = None if needed is None else _run(needed, mask)
        pattern = None if value is None else _pattern(value, queries, keys)
        if pattern is None:
            continue
        node.args = tuple(params.pop(p) for p in _SDPA_PARAMS[:3])
        node.kwargs = {**params, "attn_mask": None, "is_causal": pattern == "causal"}
        computed |= needed
    _erase_unread(graph, computed, writers)


def _computing(
    mask: fx.Node, position: int, order: dict[fx.Node, int], writers: Mapping[int, list[fx.Node]]
) -> set[fx.Node] | None:
    """The nodes making ``mask``'s value where the node at ``position`` reads it, where
    constants alone make it (else None): its ops and the writes into its memory before
    ``position``."""
    example = mask.meta.get("example_value")
    if not isinstance(example, torch.Tensor) or example.numel() > MAX_MASK_NUMEL:
        return None
    needed: set[fx.Node] = set()
    stack = [mask]
    while stack:
        node = stack.pop()
        if node in needed:
            continue
        if node.op not in ("call_function", "call_method") or _may_vary(node):
            return None
        needed.add(node)
        stack.extend(node.all_input_nodes)
        example = node.meta.get("example_value")
        if isinstance(example, torch.Tensor):
            written_by = writers.get(storage_id(example), ())
            stack.extend(w for w in written_by if order.get(w, position) < position)
    return needed


def _run(needed: set[fx.Node], mask: fx.Node) -> torch.Tensor | None:
    """``mask``'s value: the ``needed`` nodes run in graph order (writes where they were)."""
    sub = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    for node in mask.graph.nodes:
        if node in needed:
            copies[node] = sub.node_copy(node, lambda n: copies[n])
    sub.output(copies[mask])
    with torch.no_grad():
        value = fx.GraphModule(torch.nn.Module(), sub)()
    return value if isinstance(value, torch.Tensor) else None


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
    """Whether ``node`` may give another value on another call: random, effectful, or of
    symbolic sizes."""
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    if _is_random(target):
        return True
    if node.op == "call_function" and effects.has_side_effects(node.target):
        return True
    example = node.meta.get("example_value")
    return isinstance(example, torch.Tensor) and any(
        isinstance(s, torch.SymInt) for s in example.shape
    )


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
