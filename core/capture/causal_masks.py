"""A causal attention mask computed from sizes alone becomes ``is_causal=True``.

Under compilation (``torch.compiler.is_compiling()``) Hugging Face ``transformers``
builds the causal mask it skips in eager code, where it calls
``scaled_dot_product_attention(..., is_causal=True)``: ``arange``s, comparisons and an
``expand``. Given a mask, SDPA can't use its causal kernels: Llama on an H200 ran its
attention at 263 us a step against eager's 118, plus the mask's own kernels.

When a mask's value depends on nothing but constants (no graph input, nothing random),
the capture computes it once, and if it is exactly the causal pattern (``tril`` of
queries by keys; ``True``/``0`` where attended, ``False``/``-inf``/the dtype's lowest
value where not) it drops the mask and sets ``is_causal=True``: the same attention,
through the kernels eager uses.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn.functional as F

from torchkiln import effects

#: the mask's elements at most (it is computed once, at compile time)
MAX_MASK_NUMEL = 1 << 24
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")


def use_is_causal(graph: fx.Graph) -> None:
    """Replace each causal mask computed from constants by ``is_causal=True``, in place."""
    changed = False
    for node in graph.find_nodes(op="call_function", target=F.scaled_dot_product_attention):
        params = dict(zip(_SDPA_PARAMS, node.args)) | node.kwargs
        mask = params.get("attn_mask")
        if not isinstance(mask, fx.Node) or params.get("is_causal", False):
            continue
        queries, keys = (params[p].meta["example_value"].shape[-2] for p in ("query", "key"))
        if not isinstance(queries, int) or not isinstance(keys, int):
            continue
        value = _constant_value(mask)
        if value is None or not _is_causal_pattern(value, queries, keys):
            continue
        node.args = tuple(params.pop(p) for p in _SDPA_PARAMS[:3])
        node.kwargs = {**params, "attn_mask": None, "is_causal": True}
        changed = True
    if changed:
        graph.eliminate_dead_code(is_impure_node=effects.is_impure)


def _constant_value(mask: fx.Node) -> torch.Tensor | None:
    """``mask``'s value, where it depends on constants only (else None)."""
    example = mask.meta.get("example_value")
    if not isinstance(example, torch.Tensor) or example.numel() > MAX_MASK_NUMEL:
        return None
    ancestors, stack = {}, [mask]
    while stack:
        node = stack.pop()
        if node in ancestors:
            continue
        if node.op not in ("call_function", "call_method") or _may_vary(node):
            return None
        ancestors[node] = None
        stack.extend(node.all_input_nodes)
    sub = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    for node in mask.graph.nodes:  # in graph order, so that inputs come first
        if node in ancestors:
            copies[node] = sub.node_copy(node, lambda n: copies[n])
    sub.output(copies[mask])
    with torch.no_grad():
        value = fx.GraphModule(torch.nn.Module(), sub)()
    return value if isinstance(value, torch.Tensor) else None


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


def _is_causal_pattern(mask: torch.Tensor, queries: int, keys: int) -> bool:
    """Whether every (queries, keys) slice of ``mask`` attends exactly ``tril``'s positions."""
    if mask.dim() < 2 or any(s not in (1, n) for s, n in zip(mask.shape[-2:], (queries, keys))):
        return False
    slices = mask.broadcast_to((*mask.shape[:-2], queries, keys)).reshape(-1, queries, keys)
    causal = torch.ones(queries, keys, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        return bool((slices == causal).all())
    if not mask.is_floating_point():
        return False
    blocked = (slices == float("-inf")) | (slices == torch.finfo(mask.dtype).min)
    return bool(((slices == 0) == causal).all() and (blocked == ~causal).all())
