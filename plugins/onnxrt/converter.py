"""FX → ONNX: turns a functional aten-level ``torch.fx`` graph into an ``onnx.ModelProto``.

What comes in: a graph whose placeholders are tensors, whose nodes call aten
overloads (``torch.ops.aten.add.Tensor``, ...) and carry ``meta["val"]`` (the
fake tensor that make_fx records), and whose output is a flat tuple. What
goes out: a :class:`ConvertedGraph`, the ONNX model plus where each output of
the FX graph comes from.

Where to hook in: an op converter is a function
``convert(b: GraphBuilder, node, *args, **kwargs) -> str | list[str]``
registered with ``@converts(torch.ops.aten.<op>.<overload>, ...)``. Its
arguments are the node's, with every tensor replaced by a :class:`Value`
(ONNX name, dtype, shape); it emits ONNX nodes through ``b`` and returns the
ONNX name(s) of its result(s). The converters live in the ``ops_*`` modules.

Symbolic sizes: a Value's shape may hold SymInts, and so may a converter's arguments
(``view(x, [s0, 4])``). ``b.ints``, ``b.const`` and ``b.as_dtype`` compute them from the
inputs' shapes (``torchkiln_onnxrt.sizes``), so one model serves every size; a converter
that needs a concrete size asks ``sizes.concrete`` for it, which raises
``NeedsStaticShapes`` on a symbolic one (the core then compiles per size).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper
from torch.utils._pytree import tree_leaves, tree_map_only

from torchkiln.exc import NeedsStaticShapes, NotImplementedYet
from torchkiln.index_checks import index_checks
from torchkiln_onnxrt.converted import ConvertedGraph, OutputSlot
from torchkiln_onnxrt.dtypes import numpy_dtype, onnx_dtype, to_numpy
from torchkiln_onnxrt.sizes import SizeSources, fold, is_symbolic, size_expr

OPSET = 18
IR_VERSION = 8

Converter = Callable[..., "str | Sequence[str | None]"]
CONVERTERS: dict[Any, Converter] = {}


def converts(*targets: Any) -> Callable[[Converter], Converter]:
    """Register a converter for aten overloads (or whole overload packets)."""

    def register(fn: Converter) -> Converter:
        for target in targets:
            CONVERTERS[target] = fn
        return fn

    return register


@dataclass(frozen=True)
class Value:
    """A tensor of the ONNX graph being built: its name, dtype and shape (ints and SymInts)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)


def meta_of(node: torch.fx.Node) -> Any:
    """The fake value make_fx recorded for ``node``."""
    if "val" not in node.meta:
        raise NotImplementedYet(
            f"node {node.format_node()} has no meta['val']: the onnxrt backend needs "
            "graphs traced with make_fx (or run through FakeTensorProp) first"
        )
    return node.meta["val"]


def out_dtype(node: torch.fx.Node, index: int = 0) -> torch.dtype:
    val = meta_of(node)
    return (val[index] if isinstance(val, (tuple, list)) else val).dtype


def out_shape(node: torch.fx.Node, index: int = 0) -> tuple[int | torch.SymInt, ...]:
    val = meta_of(node)
    return tuple((val[index] if isinstance(val, (tuple, list)) else val).shape)


def _value_info(name: str, dtype: torch.dtype, shape: Sequence) -> onnx.ValueInfoProto:
    """A graph input or output; a symbolic size becomes a named dimension (its expression)."""
    dims = [str(size_expr(d)) if is_symbolic(d) else int(d) for d in shape]
    return helper.make_tensor_value_info(name, onnx_dtype(dtype), dims)


class GraphBuilder:
    """Accumulates ONNX nodes and initializers; converters emit through it."""

    def __init__(self, sources: SizeSources | None = None) -> None:
        #: where a call gives each symbol, and the ONNX input of each graph argument
        self.sources = sources
        self.arg_inputs: dict[int, str] = {}
        self._sizes: dict[Any, str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._ids = itertools.count()
        self._const_cache: dict[tuple, str] = {}
        self.constant_names: set[str] = set()
        self._transposed: dict[str, str] = {}

    def fresh(self, hint: str = "t") -> str:
        return f"{hint}__{next(self._ids)}"

    def op(self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any) -> Any:
        """Emit one ONNX node; returns its output name, or a list when ``outputs > 1``."""
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        return names[0] if outputs == 1 else names

    def const(self, value: Any, dtype: torch.dtype) -> str:
        """An initializer holding ``value`` (a number, nested list or array) as ``dtype``;
        a symbolic number (SymInt) is computed from the inputs' shapes instead."""
        if is_symbolic(value):
            return self.as_dtype(value, dtype)
        if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
            value = value.node.pytype(value)  # a number the ShapeEnv fixes: no guard
        if isinstance(value, list | tuple) and any(map(is_symbolic, tree_leaves(value))):
            raise NeedsStaticShapes(f"the onnxrt converter needs a constant, got sizes {value}")
        array = np.asarray(value, dtype=numpy_dtype(dtype))
        key = (array.dtype.str, array.shape, array.tobytes())
        if key in self._const_cache:
            return self._const_cache[key]
        name = self.fresh("const")
        self.initializers.append(onnx.numpy_helper.from_array(array, name))
        self.constant_names.add(name)
        if array.size <= 64:
            self._const_cache[key] = name
        return name

    def ints(self, values: Sequence[int]) -> str:
        """A 1-D int64 tensor, the form ONNX takes shapes, axes and pads in: an initializer,
        or computed from the inputs' shapes when a value is symbolic."""
        values = list(values)
        if not any(map(is_symbolic, values)):
            return self.const([int(v) for v in values], torch.int64)
        return self.op("Concat", [self.size(v) for v in values], axis=0)

    def size(self, size: int | torch.SymInt) -> str:
        """A size as a 1-D int64 tensor of one element, computed from the inputs' shapes."""
        expr = size_expr(size)
        if expr not in self._sizes:
            self._sizes[expr] = fold(
                expr, self._symbol, lambda n: self.const([n], torch.int64), self._apply
            )
        return self._sizes[expr]

    def _symbol(self, symbol: Any) -> str:
        if self.sources is None:
            raise NeedsStaticShapes(f"the onnxrt converter has no input giving the size {symbol}")
        arg, dim = self.sources.source(symbol)
        name = self.arg_inputs[arg]
        if dim is None:
            return self.reshape(name, [1])
        return self.op("Shape", [name], start=dim, end=dim + 1)

    def _apply(self, operation: str, a: str, b: str) -> str:
        """One integer operation of :func:`torchkiln_onnxrt.sizes.fold` (Python's semantics)."""
        if operation == "floordiv":  # exact: ONNX's integer Div truncates toward zero
            return self.op("Div", [self.op("Sub", [a, self._apply("mod", a, b)]), b])
        if operation == "ceildiv":
            return self.op("Neg", [self._apply("floordiv", self.op("Neg", [a]), b)])
        if operation == "mod":
            return self.op("Mod", [a, b], fmod=0)  # the divisor's sign, as Python's %
        onnx_op = {"add": "Add", "mul": "Mul", "max": "Max", "min": "Min"}[operation]
        return self.op(onnx_op, [a, b])

    def as_dtype(self, x: Value | float | int | bool, dtype: torch.dtype) -> str:
        """``x`` as an ONNX tensor of ``dtype``: cast a Value, make a constant of a number."""
        if isinstance(x, Value):
            if x.dtype == dtype:
                return x.name
            return self.op("Cast", [x.name], to=onnx_dtype(dtype))
        if isinstance(x, torch.SymFloat | torch.SymBool) and is_symbolic(x):
            raise NeedsStaticShapes(f"the onnxrt converter computes integer sizes only, not {x}")
        if is_symbolic(x):
            return self.op("Cast", [self.reshape(self.size(x), [])], to=onnx_dtype(dtype))
        return self.const(x, dtype)

    def transpose_2d(self, name: str) -> str:
        """The transpose of a matrix; remembered so matmuls can fold it into Gemm's flags."""
        if name in self._transposed:
            return self._transposed[name]
        result = self.op("Transpose", [name], perm=[1, 0])
        self._transposed[result] = name
        return result

    def untransposed(self, name: str) -> tuple[str, int]:
        """``(source, 1)`` when ``name`` is the transpose of ``source``, else ``(name, 0)``."""
        if name in self._transposed:
            return self._transposed[name], 1
        return name, 0

    def reshape(self, name: str, shape: Sequence[int]) -> str:
        return self.op("Reshape", [name, self.ints(shape)], allowzero=1)


def convert_graph(
    gm: torch.fx.GraphModule, float32_compute: Sequence[torch.dtype] = ()
) -> ConvertedGraph:
    """Convert ``gm`` (functional aten graph, flat inputs, flat tuple output).

    Inputs are tensors, sizes (ints, SymInts) and floats (0-dim float64 inputs). Ops on tensors of a dtype in
    ``float32_compute`` (bfloat16, float16: the CPU provider lacks most of their
    kernels) compute in float32 and round their results back, one aten op at a time, as
    eager does on the CPU: inputs and outputs keep their dtypes. Raises
    ``NeedsStaticShapes`` when a symbolic size can't be expressed in ONNX.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    example_inputs = [meta_of(n) for n in placeholders]
    shape_env = _shape_env(example_inputs)
    guards = len(shape_env.guards) if shape_env is not None else 0
    b = GraphBuilder(SizeSources(example_inputs))
    env: dict[torch.fx.Node, Any] = {}
    graph_inputs: list[onnx.ValueInfoProto] = []
    input_names: list[str] = []
    input_args: list[int] = []
    for arg, (node, val) in enumerate(zip(placeholders, example_inputs)):
        env[node] = val
        if isinstance(val, torch.Tensor):
            dtype, shape = val.dtype, tuple(val.shape)
        elif arg in b.sources.scalar_args:  # a SymInt no tensor's size gives
            dtype, shape = torch.int64, ()
        elif isinstance(val, int | torch.SymInt):
            continue  # computed from the tensors' sizes, or traced for this value
        elif isinstance(val, float | torch.SymFloat):  # given per call (``x * t ** 0.5``)
            dtype, shape = torch.float64, ()
        elif is_symbolic(val):
            raise NeedsStaticShapes(f"graph input {node.name} is a symbolic {type(val).__name__}")
        else:
            raise NotImplementedYet(
                f"graph input {node.name} is a {type(val).__name__}: the onnxrt backend takes "
                "tensors and integer sizes"
            )
        name = f"in_{len(input_names)}_{node.name}"
        graph_inputs.append(_value_info(name, dtype, shape))
        input_names.append(name)
        input_args.append(arg)
        b.arg_inputs[arg] = name
        if isinstance(val, torch.Tensor | float | torch.SymFloat):
            env[node] = Value(name, dtype, shape)
    output_node = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            tensor = getattr(gm, node.target)
            if not isinstance(tensor, torch.Tensor):
                raise NotImplementedYet(f"get_attr {node.target} is not a tensor")
            array = to_numpy(tensor)
            env[node] = Value(b.const(array, tensor.dtype), tensor.dtype, tuple(tensor.shape))
        elif node.op == "call_function":
            env[node] = _convert_call(b, node, env, tuple(float32_compute))
        elif node.op == "output":
            output_node = node
        else:
            raise NotImplementedYet(
                f"the onnxrt backend converts aten graphs only; got a {node.op} node "
                f"({node.format_node()}); run the graph through torchkiln.aot first"
            )
    assert output_node is not None
    if shape_env is not None and len(shape_env.guards) > guards:
        raise NeedsStaticShapes(
            "converting needed concrete sizes (it guarded "
            f"{shape_env.guards[guards].expr}): a converter compares symbolic sizes"
        )
    converted = _finish(b, graph_inputs, input_names, output_node, env)
    converted.input_args = input_args
    converted.sources = b.sources
    converted.index_checks = index_checks(gm)
    return converted


def _shape_env(example_inputs: Sequence[Any]) -> Any:
    """The ShapeEnv of the graph's symbolic sizes, or None when it has none."""
    for val in example_inputs:
        sizes = val.shape if isinstance(val, torch.Tensor) else [val]
        for size in sizes:
            if isinstance(size, torch.SymInt):
                return size.node.shape_env
    return None


def _convert_call(
    b: GraphBuilder, node: torch.fx.Node, env: dict, float32_compute: tuple[torch.dtype, ...]
) -> Any:
    if node.target is operator.getitem:
        source, index = node.args
        return env[source][index]
    target = node.target
    converter = CONVERTERS.get(target) or CONVERTERS.get(getattr(target, "overloadpacket", None))
    if converter is None:
        raise NotImplementedYet(
            f"the onnxrt backend has no converter for {target} (node {node.format_node()}); "
            "set torchkiln.config.suppress_errors = True to run this graph eagerly"
        )
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    val = meta_of(node)
    if _has_dtype((args, kwargs, val), float32_compute):
        result = _convert_in_float32(b, node, converter, args, kwargs, float32_compute)
    else:
        result = converter(b, node, *args, **kwargs)
    if isinstance(val, (tuple, list)):
        return [
            Value(name, v.dtype, tuple(v.shape)) if isinstance(v, torch.Tensor) else None
            for name, v in zip(result, val)
        ]
    if isinstance(val, int | torch.SymInt):  # a size: its converter returns it as it is
        return result
    if is_symbolic(val):
        raise NeedsStaticShapes(f"{target} computes a {type(val).__name__}, not an integer size")
    if not isinstance(val, torch.Tensor):
        raise NotImplementedYet(f"{target} returns a {type(val).__name__}, not a tensor")
    return Value(result, val.dtype, tuple(val.shape))


def _has_dtype(tree: Any, dtypes: tuple[torch.dtype, ...]) -> bool:
    """Whether a Value or tensor of ``tree`` has one of ``dtypes``."""
    return any(
        isinstance(leaf, (Value, torch.Tensor)) and leaf.dtype in dtypes
        for leaf in tree_leaves(tree)
    )


def _convert_in_float32(
    b: GraphBuilder,
    node: torch.fx.Node,
    converter: Converter,
    args: Any,
    kwargs: Any,
    dtypes: tuple[torch.dtype, ...],
) -> Any:
    """Run ``converter`` on float32 copies of the operands of ``dtypes``; round its results back.

    The converter reads its result dtype from ``node.meta["val"]``, so the node shows
    float32 results while it runs.
    """

    def widen(v: Value) -> Value:
        return (
            Value(b.as_dtype(v, torch.float32), torch.float32, v.shape) if v.dtype in dtypes else v
        )

    def widen_meta(t: torch.Tensor) -> torch.Tensor:
        return t.to(torch.float32) if t.dtype in dtypes else t

    val = node.meta["val"]
    node.meta["val"] = tree_map_only(torch.Tensor, widen_meta, val)
    try:
        result = converter(
            b, node, *tree_map_only(Value, widen, args), **tree_map_only(Value, widen, kwargs)
        )
    finally:
        node.meta["val"] = val

    def narrow(name: str | None, v: Any) -> str | None:
        if name is None or not isinstance(v, torch.Tensor) or v.dtype not in dtypes:
            return name
        return b.op("Cast", [name], to=onnx_dtype(v.dtype))

    if isinstance(val, (tuple, list)):
        return [narrow(name, v) for name, v in zip(result, val)]
    return narrow(result, val)


def _finish(
    b: GraphBuilder,
    graph_inputs: list[onnx.ValueInfoProto],
    input_names: list[str],
    output_node: torch.fx.Node,
    env: dict,
) -> ConvertedGraph:
    (results,) = output_node.args
    if not isinstance(results, (tuple, list)):
        results = (results,)
    slots: list[OutputSlot] = []
    outputs: list[onnx.ValueInfoProto] = []
    output_metas: list[torch.Tensor] = []
    index_of: dict[torch.fx.Node, int] = {}
    output_names: set[str] = set()
    for result in results:
        if not isinstance(result, torch.fx.Node):
            slots.append(OutputSlot("const", value=result))
            continue
        if result in index_of:
            slots.append(OutputSlot("onnx", index_of[result]))
            continue
        value = env[result]
        if not isinstance(value, Value):  # a size
            kind = "size" if is_symbolic(value) else "const"
            slots.append(OutputSlot(kind, value=value if kind == "size" else int(value)))
            continue
        name = value.name
        if name in input_names or name in b.constant_names or name in output_names:
            # ONNX forbids inputs and initializers as outputs, and outputs named twice.
            name = b.op("Identity", [name])
        output_names.add(name)
        index_of[result] = len(outputs)
        slots.append(OutputSlot("onnx", len(outputs)))
        outputs.append(_value_info(name, value.dtype, value.shape))
        output_metas.append(meta_of(result))
    nodes = _live_nodes(b.nodes, [o.name for o in outputs])
    used = {name for node in nodes for name in node.input}
    initializers = [t for t in b.initializers if t.name in used]
    graph = helper.make_graph(nodes, "torchkiln_graph", graph_inputs, outputs, initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="torchkiln_onnxrt",
    )
    model.ir_version = IR_VERSION
    converted = ConvertedGraph(
        model.SerializeToString(), input_names, [o.name for o in outputs], output_metas, slots
    )
    converted.model = model  # already parsed: the cached property need not parse it again
    return converted


def _live_nodes(nodes: list[onnx.NodeProto], outputs: list[str]) -> list[onnx.NodeProto]:
    """The nodes the outputs depend on, in order (converters may leave unused results)."""
    needed = set(outputs)
    live = []
    for node in reversed(nodes):
        if needed.intersection(node.output):
            live.append(node)
            needed.update(node.input)
    return live[::-1]
