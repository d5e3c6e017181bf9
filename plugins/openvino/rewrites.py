"""Rewrites of an aten graph before OpenVINO's frontend converts it.

:func:`expand_layer_norms`: the frontend converts ``native_layer_norm`` to its output 0
alone, but a training graph saves the norm's mean and reciprocal standard deviation for
the backward. Left to the next backend, every layer norm of a transformer cut its
forward graph in two (hf_bert's forward: 31 partitions, each an OpenVINO call). The
statistics of such a layer norm are computed here with ops the frontend converts
(``var_mean``, ``rsqrt``), so that OpenVINO computes them as well.

:func:`expand_attention`: the same for the fused CPU attention of a training graph,
whose forward saves the log-sum-exp of the scores for the backward, and for its
backward, which the frontend does not convert at all: both are written out as matrix
products and a softmax, so that a transformer's forward and backward graphs are no
longer cut at every attention (hf_bert's: 5 and 7 partitions).
:func:`expand_convolution_backward` writes out a convolution's backward, which the
frontend does not convert either, as convolutions. :func:`expand_fused` writes out the
ops the trace keeps whole for torch's fused kernels
(:data:`torchkiln_openvino.decompositions.WRITTEN_OUT`: backward ops, the training batch
norm) with the decompositions the trace would have applied.

:func:`for_openvino` also counts the booleans of cumulative sums
(:func:`count_booleans`) and returns each output once: the frontend fails on a graph
that returns one value twice ("Tensor name is not a number"), as a training graph does
when it saves an output for the backward through an alias (chain's softmax output);
nor does the model return the graph's inputs (:func:`model_outputs`).
"""

from __future__ import annotations

import functools
import math
import operator

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from torchkiln.effects import is_impure
from torchkiln_openvino import decompositions
from torchkiln_openvino.decompositions import LARGE

aten = torch.ops.aten

#: The dtypes of the layer norms and attentions that are written out; torch computes the
#: statistics of lower-precision ones in float32, which the ops written out would not.
EXPANDED_DTYPES = frozenset({torch.float32, torch.float64})

ATTENTION = aten._scaled_dot_product_flash_attention_for_cpu.default
ATTENTION_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
CONVOLUTION_BACKWARD = aten.convolution_backward.default

#: The ops the frontend does not convert (or not wholly), which the rewrites here write out
WRITTEN_OUT = frozenset({ATTENTION_BACKWARD, CONVOLUTION_BACKWARD}) | decompositions.WRITTEN_OUT


def expands(node: fx.Node) -> bool:
    """Whether a rewrite here gives all of ``node``'s outputs: a layer norm
    (:func:`expand_layer_norms`), an attention or its backward without dropout
    (:func:`expand_attention`), the backward of a convolution neither grouped nor
    transposed (:func:`expand_convolution_backward`), an op the trace keeps whole for
    torch's fused kernel (:func:`expand_fused`), save the backwards
    :data:`~torchkiln_openvino.decompositions.FUSED_BACKWARDS` of large tensors."""
    if node.target in decompositions.FUSED_BACKWARDS:
        return node.args[0].meta["val"].numel() < LARGE
    if node.target in decompositions.WRITTEN_OUT:
        return True
    if node.target is CONVOLUTION_BACKWARD:
        transposed, groups = node.args[7], node.args[9]
        return not transposed and groups == 1
    if node.target is aten.native_layer_norm.default:
        # torch's kernel computes a large norm's statistics with it, OpenVINO in 3 passes
        # more (a 4096x1024 norm: 6.3 ms for the norm, 8.5 more for the statistics; torch's
        # 4.1 in all): a large training norm runs in torch
        x = node.args[0].meta["val"]
        return x.dtype in EXPANDED_DTYPES and x.numel() < LARGE
    if node.target in (ATTENTION, ATTENTION_BACKWARD):
        query = node.args[0 if node.target is ATTENTION else 1]
        return query.meta["val"].dtype in EXPANDED_DTYPES and _attention_options(node)[0] == 0
    return False


def expand_layer_norms(gm: fx.GraphModule) -> None:
    """Computes, in place, the statistics of the layer norms of ``gm`` that the graph reads
    with ``var_mean`` and ``rsqrt``, the norm itself still giving output 0.

    ``native_layer_norm(x, shape, w, b, eps)`` returns ``(y, mean, rstd)``, the statistics
    over the last ``len(shape)`` dims, kept as dims of size 1. OpenVINO runs ``y`` as one
    fused op (MVN); ``y`` written out as ``(x - mean) * rstd`` took twice as long (chain:
    a 4096x1024 forward went from 21 to 37 ms; from 21 to 20 ms this way).
    """
    graph = gm.graph
    for node in list(graph.find_nodes(op="call_function", target=aten.native_layer_norm.default)):
        statistics = [u for u in node.users if u.target is operator.getitem and u.args[1] != 0]
        if not statistics or not expands(node):
            continue
        x, shape, *_, eps = node.args
        dims = list(range(x.meta["val"].dim() - len(shape), x.meta["val"].dim()))
        with graph.inserting_before(node):
            var_mean = _call(graph, aten.var_mean.correction, x, dims, correction=0, keepdim=True)
            var = _call(graph, operator.getitem, var_mean, 0)
            mean = _call(graph, operator.getitem, var_mean, 1)
            rstd = _call(graph, aten.rsqrt.default, _call(graph, aten.add.Tensor, var, eps))
        for user in statistics:
            user.replace_all_uses_with(mean if user.args[1] == 1 else rstd)
            graph.erase_node(user)
    gm.recompile()


def expand_attention(gm: fx.GraphModule) -> None:
    """Writes out, in place, the fused CPU attentions of ``gm`` whose log-sum-exp the graph
    reads (a training forward's) and their backwards, as :func:`attention` and
    :func:`attention_backward` traced at their inputs' values."""
    graph = gm.graph
    for node in list(graph.nodes):
        if node.target not in (ATTENTION, ATTENTION_BACKWARD) or not expands(node):
            continue
        reads = {u.args[1] for u in node.users if u.target is operator.getitem}
        if node.target is ATTENTION and reads <= {0}:
            continue  # OpenVINO runs output 0 alone as one fused op
        *inputs, mask = _attention_inputs(node)
        inputs += [mask] if mask is not None else []
        _, causal, scale = _attention_options(node)
        math_of = attention if node.target is ATTENTION else attention_backward
        written_out = functools.partial(math_of, causal=causal, scale=scale)
        _inline(node, written_out, inputs)
    gm.recompile()


def expand_convolution_backward(gm: fx.GraphModule) -> None:
    """Writes out, in place, the convolution backwards of ``gm`` as convolutions
    (:func:`convolution_backward`), so that a CNN's backward graph is not cut at each of
    them (convnet's: 38 partitions, 15 of them torch's)."""
    graph = gm.graph
    for node in list(graph.find_nodes(op="call_function", target=CONVOLUTION_BACKWARD)):
        if expands(node):
            grad, input, weight, _, *options = node.args  # bias sizes: grad's channels
            written_out = functools.partial(convolution_backward, *options)
            _inline(node, written_out, [grad, input, weight])
    gm.recompile()


def expand_fused(gm: fx.GraphModule) -> None:
    """Writes out, in place, the ops of ``gm`` the trace kept whole for torch's fused
    kernels (:data:`torchkiln_openvino.decompositions.WRITTEN_OUT`), as their
    decompositions (:func:`torchkiln_openvino.decompositions.written_out`) traced with the
    trace's own table: OpenVINO gets the ops it would have got from a decomposed trace."""
    for node in list(gm.graph.nodes):
        if node.target in decompositions.WRITTEN_OUT and expands(node):
            _inline_call(node, decompositions.written_out(node.target))
    gm.recompile()


def _inline_call(node: fx.Node, fn) -> None:
    """Replaces ``node`` by the aten ops of ``fn`` called on its arguments, its tensors
    traced at their values and the rest (sizes, flags) as constants."""
    flat, spec = tree_flatten((node.args, node.kwargs))
    tensors = [k for k, arg in enumerate(flat) if isinstance(arg, fx.Node)]

    def call(*values):
        given = list(flat)
        for k, value in zip(tensors, values):
            given[k] = value
        args, kwargs = tree_unflatten(given, spec)
        return fn(*args, **kwargs)

    _inline(node, call, [flat[k] for k in tensors], decompositions.table())


def convolution_backward(
    stride, padding, dilation, transposed, output_padding, groups, output_mask, grad, input, weight
):
    """``convolution_backward`` of an ungrouped convolution (the options first): the input's
    gradient is the transposed convolution of the output's; the weight's is the convolution
    of the input, batch and channels swapped, with the output's gradient as its kernel
    (strides become dilations); the bias's, the output's gradient summed per channel."""
    spatial = range(2, grad.dim())
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        extent = [
            (grad.shape[d] - 1) * stride[d - 2]
            - 2 * padding[d - 2]
            + dilation[d - 2] * (weight.shape[d] - 1)
            + 1
            for d in spatial
        ]
        extra = [input.shape[d] - extent[d - 2] for d in spatial]
        grad_input = aten.convolution.default(
            grad, weight, None, stride, padding, dilation, True, extra, 1
        )
    if output_mask[1]:
        batch_as_channels = input.transpose(0, 1), grad.transpose(0, 1)
        no_padding = [0] * len(stride)
        swapped = aten.convolution.default(
            *batch_as_channels, None, dilation, padding, stride, False, no_padding, 1
        )
        for d in spatial:  # past the kernel where the stride does not divide the input
            swapped = swapped.narrow(d, 0, weight.shape[d])
        grad_weight = swapped.transpose(0, 1)
    if output_mask[2]:
        grad_bias = grad.sum([0, *spatial])
    return grad_input, grad_weight, grad_bias


def attention(q, k, v, mask=None, *, causal: bool = False, scale: float | None = None):
    """``_scaled_dot_product_flash_attention_for_cpu``: the output and the log-sum-exp of
    each row of scores (the backward's softmax, without the scores saved)."""
    scores = _scores(q, _repeat_heads(k, q), mask, causal, scale)
    most = scores.amax(-1, keepdim=True)  # exp of the largest score is 1: no overflow
    lse = torch.log(torch.exp(scores - most).sum(-1)) + most.squeeze(-1)
    return torch.exp(scores - lse.unsqueeze(-1)) @ _repeat_heads(v, q), lse


def attention_backward(
    grad, q, k, v, out, lse, mask=None, *, causal: bool = False, scale: float | None = None
):
    """``_scaled_dot_product_flash_attention_for_cpu_backward``: the gradients of the query,
    key and value, the softmax recomputed from the saved log-sum-exp."""
    scale = scale or 1 / math.sqrt(q.shape[-1])
    keys, values = _repeat_heads(k, q), _repeat_heads(v, q)
    p = torch.exp(_scores(q, keys, mask, causal, scale) - lse.unsqueeze(-1))
    grad_scores = p * (grad @ values.transpose(-2, -1) - (grad * out).sum(-1, keepdim=True))
    grad_k = grad_scores.transpose(-2, -1) @ q * scale
    grad_v = p.transpose(-2, -1) @ grad
    return grad_scores @ keys * scale, _sum_heads(grad_k, k), _sum_heads(grad_v, v)


def _scores(q, k, mask, causal: bool, scale: float | None):
    scores = q @ k.transpose(-2, -1) * (scale or 1 / math.sqrt(q.shape[-1]))
    if causal:
        rows, columns = scores.shape[-2:]
        upper = ~torch.full((rows, columns), True, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(upper, -math.inf)
    if mask is None:
        return scores
    return scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask


def _repeat_heads(t, q):
    """``t``'s heads each repeated for the query heads they serve (grouped-query attention)."""
    groups = q.shape[1] // t.shape[1]
    if groups == 1:
        return t
    b, h, s, e = t.shape
    return t.unsqueeze(2).expand(b, h, groups, s, e).reshape(b, h * groups, s, e)


def _sum_heads(grad, t):
    """The gradient of :func:`_repeat_heads`: each group's gradients summed."""
    groups = grad.shape[1] // t.shape[1]
    if groups == 1:
        return grad
    b, h, s, e = t.shape
    return grad.reshape(b, h, groups, s, e).sum(2)


def _attention_inputs(node: fx.Node) -> tuple:
    """The tensor inputs of an attention (``q, k, v``) or its backward (``grad, q, k, v,
    out, lse``), then its mask (``None`` if none)."""
    count = 3 if node.target is ATTENTION else 6
    return (*node.args[:count], node.kwargs.get("attn_mask"))


def _attention_options(node: fx.Node) -> tuple[float, bool, float | None]:
    """``dropout_p, is_causal, scale`` of an attention or its backward."""
    schema = node.target._schema.arguments
    values = {a.name: a.default_value for a in schema if a.has_default_value()}
    values.update(zip((a.name for a in schema), node.args))
    values.update(node.kwargs)
    return values.get("dropout_p", 0.0), values.get("is_causal", False), values.get("scale")


def count_booleans(gm: fx.GraphModule) -> None:
    """Makes, in place, the cumulative sums of booleans in ``gm`` sums of their count type:
    torch counts the booleans (Hugging Face's position ids from an attention mask), the
    frontend would keep them boolean."""
    graph = gm.graph
    for node in list(graph.find_nodes(op="call_function", target=aten.cumsum.default)):
        source = node.args[0]
        if source.meta["val"].dtype == torch.bool:
            with graph.inserting_before(node):
                counts = node.meta["val"].dtype
                node.replace_input_with(
                    source, _call(graph, aten._to_copy.default, source, dtype=counts)
                )
    gm.recompile()


def repeated_outputs(gm: fx.GraphModule) -> dict[int, int]:
    """Output position → the earlier position of the same value (itself or an alias)."""
    first: dict = {}
    repeats = {}
    for position, value in enumerate(tree_leaves(gm.graph.output_node().args[0])):
        source = value
        while isinstance(source, fx.Node) and source.target is aten.alias.default:
            source = source.args[0]
        if source in first:
            repeats[position] = first[source]
        else:
            first[source] = position
    return repeats


def returned_inputs(gm: fx.GraphModule) -> dict[int, int]:
    """Output position → the index of the input that output is (a training forward
    returns the weights it saves for the backward)."""
    index = {node: k for k, node in enumerate(gm.graph.find_nodes(op="placeholder"))}
    outputs = tree_leaves(gm.graph.output_node().args[0])
    return {position: index[value] for position, value in enumerate(outputs) if value in index}


def model_outputs(gm: fx.GraphModule) -> list[int]:
    """The positions of ``gm``'s outputs that the OpenVINO model computes: each value once,
    and no input as it is (OpenVINO would copy it into an output buffer on every call: 2.5
    ms a step for mlp's four 1024x1024 weights; the runtime returns the input itself)."""
    skipped = repeated_outputs(gm).keys() | returned_inputs(gm).keys()
    count = len(tree_leaves(gm.graph.output_node().args[0]))
    return [position for position in range(count) if position not in skipped]


def for_openvino(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` the frontend converts: its layer norms, attentions, convolution
    backwards and the ops kept whole for torch's fused kernels written out, its cumulative
    sums of booleans counted, and its outputs those
    of :func:`model_outputs` (the runtime returns a repeated one as an alias of the first,
    an input as itself)."""
    graph = fx.Graph()
    outputs = tree_leaves(graph.graph_copy(gm.graph, {}))
    graph.output(tuple(outputs[p] for p in model_outputs(gm)))
    copy = fx.GraphModule(gm, graph)
    expand_layer_norms(copy)
    expand_attention(copy)
    expand_convolution_backward(copy)
    expand_fused(copy)
    count_booleans(copy)
    copy.graph.eliminate_dead_code(is_impure_node=is_impure)
    copy.recompile()
    return copy


def _inline(node: fx.Node, fn, inputs: list[fx.Node], table: dict | None = None) -> None:
    """Replaces ``node`` by the aten ops of ``fn(*inputs)``, traced at the inputs' values
    (with the decompositions ``table``)."""
    traced = make_fx(fn, table, tracing_mode="fake")(*(i.meta["val"] for i in inputs))
    graph = node.graph
    with graph.inserting_before(node):
        outputs = graph.graph_copy(
            traced.graph, dict(zip(traced.graph.find_nodes(op="placeholder"), inputs))
        )
    if not isinstance(node.meta["val"], (tuple, list)):
        node.replace_all_uses_with(outputs)
    for user in list(node.users):
        user.replace_all_uses_with(outputs[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)


def _call(graph: fx.Graph, target, *args, **kwargs) -> fx.Node:
    """A new node calling ``target``, its ``meta["val"]`` computed on its inputs' (fake) values."""
    node = graph.call_function(target, args, kwargs)
    values = fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
    node.meta["val"] = target(*values[0], **values[1])
    return node
