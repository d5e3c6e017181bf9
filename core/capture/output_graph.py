"""The state one capture builds: the FX graph, its inputs, guards and side effects.

``OutputGraph`` is shared by the root frame and every inlined call. It turns
real values into variable trackers (``wrap``, with the guards each value
needs), adds torch operations to the graph (``call_op``, run on fake tensors
to learn the result's metadata), and records the mutations of pre-existing
Python objects (``side_effects``) so that the transformed code replays them.

Tensors reached through a source (arguments, globals, closure cells, module
parameters and buffers) are **lifted as graph inputs**: the graph's
placeholders, in order, are ``inputs`` and the backend's example inputs are
their real values on the first call (parameters included).
"""

from __future__ import annotations

import operator
import re
import types
from typing import Any

import torch
import torch.fx

from torchkiln import effects
from torchkiln.capture import dynamic, inference_mode, runtime
from torchkiln.capture import variables as V
from torchkiln.capture.aliasing import is_argument, is_weight, storage_id
from torchkiln.capture.builder import build
from torchkiln.capture.fakes import FakePropagation
from torchkiln.capture.guards import COST_GLOBAL_STATE, GuardSet
from torchkiln.capture.variables.nn_modules import MODULE_MEMBER_METHODS
from torchkiln.capture.variables.tensors import SYM_PYTHON_TYPES
from torchkiln.compiled_module import call_override, has_call_hooks
from torchkiln.exc import Unsupported

#: Tensor attributes that are themselves tensors (views), put in the graph as ``getattr``.
TENSOR_VALUED_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}

#: Tensor methods that need the data, not just the metadata: they break the graph.
DATA_DEPENDENT_METHODS = {
    "item",
    "tolist",
    "numpy",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "data_ptr",
    "nonzero_static",
    "backward",
    "register_hook",
    "retain_grad",
    "storage",
    "untyped_storage",
}


class SideEffects:
    """Mutations of objects that exist outside the frame, in program order."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self._containers: set[int] = set()

    def mutate(self, container: V.VariableTracker) -> None:
        """A list, dict or set with a source was changed: its final contents are written back."""
        if container.source is None or id(container) in self._containers:
            return
        self._containers.add(id(container))
        self.events.append(("container", container))

    def store_attr(self, obj: V.VariableTracker, name: str, value: V.VariableTracker) -> None:
        if obj.source is None:
            raise Unsupported(f"setattr on {obj.describe()} that has no source")
        self.events.append(("attr", obj, name, value))

    def delete_attr(self, obj: V.VariableTracker, name: str) -> None:
        if obj.source is None:
            raise Unsupported(f"delattr on {obj.describe()} that has no source")
        self.events.append(("delattr", obj, name))

    def store_cell(self, contents_expr: str, value: V.VariableTracker) -> None:
        self.events.append(("cell", contents_expr, value))

    def store_global(self, globals_expr: str, name: str, value: V.VariableTracker) -> None:
        self.events.append(("global", globals_expr, name, value))


class OutputGraph:
    """The graph under construction and everything needed to call it later."""

    def __init__(self, guards: GuardSet, replay: FakePropagation | None = None):
        self.graph = torch.fx.Graph()
        self.fakes = FakePropagation(replay)
        self.guards = guards
        self.inputs: list[tuple[str, torch.Tensor, torch.fx.Node]] = []
        self.side_effects = SideEffects()
        self.by_id: dict[int, V.VariableTracker] = {}
        #: ``id(obj.__dict__)`` -> the tracker of ``obj``, a user object read from outside
        self.dict_owners: dict[int, V.UserObjectVariable] = {}
        self._keepalive: list[Any] = []
        self.initial_grad_enabled = torch.is_grad_enabled()
        self.grad_enabled = self.initial_grad_enabled
        self.initial_autocast = runtime.autocast_snapshot()
        self.initial_inference_modes = inference_mode.modes()
        self.autocast = self.initial_autocast
        self.global_overrides: dict[tuple[int, str], V.VariableTracker] = {}
        self.mutates_inputs = False
        self._input_storages: set[int] = set()
        #: input storages ``as_strided`` addresses at an explicit offset (see ``aliasing``)
        self.storage_reads: set[int] = set()
        #: the nodes that write into each storage (in place, ``out=``, ``x[i] = ...``)
        self.writers: dict[int, list[torch.fx.Node]] = {}
        guards.grad_mode(self.grad_enabled)
        guards.default_dtype()
        guards.function_modes()
        guards.torch_state()

    # -- graph building -------------------------------------------------------

    def prune_unused_sizes(self) -> None:
        """Drop size computations nothing reads (``x.shape[0] > 2`` that Python branched on):
        they are pure, and a graph of nothing else need not be compiled."""
        for node in reversed(self.graph.nodes):
            value = node.meta.get("example_value")
            if (
                node.op in ("call_function", "call_method")
                and not node.users
                and _contains_sym(value)
                and not _contains_tensor(value)
            ):
                self.graph.erase_node(node)

    def op_count(self) -> int:
        return sum(
            n.op in ("call_function", "call_method", "call_module") for n in self.graph.nodes
        )

    def add_input(self, value: torch.Tensor, source: str) -> V.TensorVariable:
        name = re.sub(r"\W+", "_", source.replace("___fn.__globals__", "G")).strip("_") or "input"
        last = self.inputs[-1][2] if self.inputs else None
        ctx = (
            self.graph.inserting_after(last)
            if last is not None
            else self.graph.inserting_before(None)
        )
        with ctx:
            node = self.graph.placeholder(name)
        fake = self.fakes.from_tensor(value, source)
        node.meta["example_value"] = fake
        node.meta["weight"] = is_weight(source, value)
        self._input_storages.add(storage_id(fake))
        self.inputs.append((source, value, node))
        self.guards.tensor(source, value, fake)
        return V.TensorVariable(node, fake, source, type(value))

    def call_op(self, kind: str, target: Any, args: list, kwargs: dict) -> V.VariableTracker:
        """Run ``target`` on fake tensors; tensors out → a graph node, anything else → a constant."""
        proxy_args = tuple(to_node(a) for a in args)
        proxy_kwargs = {k: to_node(v) for k, v in kwargs.items()}
        fake_args = [to_fake(a) for a in args]
        fake_kwargs = {k: to_fake(v) for k, v in kwargs.items()}
        name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
        layout_before = self._input_layout(fake_args[0]) if fake_args else None
        try:
            example = self.fakes.run(kind, target, fake_args, fake_kwargs)
        except Unsupported:
            raise
        except Exception as e:
            if type(e).__name__ == "DynamicOutputShapeException":
                why = dynamic.current().data_dependent_break
                raise Unsupported(
                    f"{name} has a data-dependent output size ({type(e).__name__})"
                    + (f"; {why}" if why else "")
                ) from e
            if type(e).__name__ == "DataDependentOutputException":
                raise Unsupported(f"{name} has a data-dependent result ({type(e).__name__})") from e
            raise Unsupported(f"{name} failed while tracing: {type(e).__name__}: {e}") from e
        self._note_storage_read(name, fake_args, fake_kwargs)
        if layout_before is not None and self._input_layout(fake_args[0]) != layout_before:
            # backends (the AOT layer) compile data mutations of inputs, not layout changes
            raise Unsupported(
                f"{name} changes the size, strides, storage or requires_grad of a graph input"
            )
        if (
            not _contains_tensor(example)
            and not _contains_sym(example)
            and target is not operator.setitem
        ):
            if example is None and kind == "call_function" and effects.has_side_effects(target):
                return self._effect(target, args, proxy_args, proxy_kwargs)
            if not is_plain_result(example):
                raise Unsupported(f"{name} returned a {type(example).__name__}")
            return self.wrap_result(None, example)
        node = self.graph.create_node(kind, target, proxy_args, proxy_kwargs)
        node.meta["example_value"] = example
        if target is operator.setitem:
            self._note_write(args[0], node)
        for arg in [*args, *kwargs.values()]:
            if isinstance(arg, V.TensorVariable) and arg.example is example:
                self._note_write(arg, node)
                return arg  # in-place op: keep the input's identity
        return self.wrap_result(node, example)

    def _effect(self, target: Any, args: list, proxy_args: tuple, proxy_kwargs: dict):
        """A call that returns nothing and is made for what it does (an op that writes its
        arguments, an assertion, a print): a node of its own, which nothing reads and no
        backend may drop. Its tensor arguments count as written when its schema writes."""
        node = self.graph.create_node("call_function", target, proxy_args, proxy_kwargs)
        node.meta["example_value"] = None
        if effects.writes_arguments(target):
            for arg in args:
                for vt in arg.items if isinstance(arg, V.ListVariable | V.TupleVariable) else [arg]:
                    if isinstance(vt, V.TensorVariable):
                        self._note_write(vt, node)
        return V.ConstantVariable(None)

    def _note_storage_read(self, name: str, fake_args: list, fake_kwargs: dict) -> None:
        """``as_strided`` at an explicit storage offset addresses the whole storage, where
        an input may start anywhere: such an input is passed as its storage from offset 0
        (``aliasing``), which a gradient can't flow through."""
        position = _STORAGE_OFFSET_POSITION.get(name)
        if position is None or not fake_args or not isinstance(fake_args[0], torch.Tensor):
            return
        if len(fake_args) <= position and "storage_offset" not in fake_kwargs:
            return
        storage = storage_id(fake_args[0])
        if storage not in self._input_storages:
            return
        for source, value, node in self.inputs:
            if storage_id(node.meta["example_value"]) != storage:
                continue
            if value.requires_grad or not is_argument(source):
                what = "requires grad" if value.requires_grad else "is a parameter or buffer"
                raise Unsupported(
                    f"{name} at a storage offset of {source}, which {what}: run in eager"
                )
        self.storage_reads.add(storage)

    def _input_layout(self, fake: Any) -> tuple | None:
        """Size, strides, offset, storage and requires_grad of ``fake`` if it views an
        input's memory, else None (``set_``, ``requires_grad_`` change the last two)."""
        if not isinstance(fake, torch.Tensor) or storage_id(fake) not in self._input_storages:
            return None
        storage = storage_id(fake)
        return (fake.shape, fake.stride(), fake.storage_offset(), storage, fake.requires_grad)

    def _note_write(self, vt: V.TensorVariable, node: torch.fx.Node) -> None:
        """``node`` wrote into ``vt``: through a view or not, is that an input's memory?"""
        storage = storage_id(vt.example)
        self.writers.setdefault(storage, []).append(node)
        self.mutates_inputs |= storage in self._input_storages

    def wrap_result(self, node: torch.fx.Node | None, example: Any) -> V.VariableTracker:
        if isinstance(example, torch.Tensor):
            return V.TensorVariable(node, example)
        if isinstance(example, SYM_TYPES):
            if not _contains_symbolic(example):  # the ShapeEnv knows its value
                return V.ConstantVariable(SYM_PYTHON_TYPES[type(example)](example))
            return V.SymNodeVariable(node, example)
        if isinstance(example, (tuple, list)) and (
            _contains_tensor(example) or _contains_sym(example)
        ):
            items = []
            for i, item in enumerate(example):
                sub = None
                if _contains_tensor(item) or _contains_symbolic(item):
                    sub = self.graph.call_function(operator.getitem, (node, i))
                    sub.meta["example_value"] = item
                items.append(self.wrap_result(sub, item))
            if isinstance(example, list):
                return V.ListVariable(items)
            if isinstance(example, torch.Size):
                return V.TupleVariable(items, cls=torch.Size)
            return V.TupleVariable(items, cls=type(example), fields=_fields_of(example))
        if V.is_constant_value(example):
            return V.ConstantVariable(example)
        if isinstance(example, list):
            return V.ListVariable([self.wrap_result(None, e) for e in example])
        raise Unsupported(f"an operation returned a {type(example).__name__}")

    def set_grad_enabled(self, mode: bool) -> None:
        """Switch grad mode now (for tracing) and in the graph (for running)."""
        if mode != self.grad_enabled:
            self.graph.call_function(torch._C._set_grad_enabled, (mode,))
            torch._C._set_grad_enabled(mode)
            self.grad_enabled = mode

    def set_autocast(self, state: tuple) -> None:
        """Switch autocast (a ``runtime.autocast_snapshot``) now and in the graph, as grad mode."""
        if state != self.autocast:
            if self.autocast == self.initial_autocast:  # switches restore all of it: guard all
                fn = self.guards.bind(runtime.autocast_snapshot, "autocast")
                self.guards.add(
                    f"{fn}() == {self.initial_autocast!r}",
                    COST_GLOBAL_STATE,
                    "autocast state (every device) is as at capture",
                )
            self.graph.call_function(runtime.set_autocast, (state,))
            runtime.set_autocast(state)
            self.autocast = state

    # -- tensors ----------------------------------------------------------------

    def tensor_getattr(self, vt: V.TensorVariable, name: str) -> V.VariableTracker:
        if name in TENSOR_VALUED_ATTRS:
            return self.call_op("call_function", getattr, [vt, V.ConstantVariable(name)], {})
        if name in ("grad", "data", "_base", "grad_fn", "_version"):
            raise Unsupported(f"reading Tensor.{name}")
        if name == "shape" and _contains_sym(vt.example.shape):
            return self.call_op("call_method", "size", [vt], {})
        try:
            attr = getattr(vt.example, name)
        except AttributeError as e:
            raise Unsupported(f"Tensor has no attribute {name!r}") from e
        if callable(attr):
            return V.BoundMethodVariable(vt, name)
        if V.is_constant_value(attr):
            return V.ConstantVariable(attr)
        raise Unsupported(f"Tensor attribute {name!r} of type {type(attr).__name__}")

    def tensor_method(
        self, vt: V.TensorVariable, name: str, args: list, kwargs: dict
    ) -> V.VariableTracker:
        if name in DATA_DEPENDENT_METHODS:
            raise Unsupported(f"Tensor.{name}() needs the tensor's data (data-dependent)")
        if name == "__setitem__":
            self.call_op("call_function", operator.setitem, [vt, *args], {})
            return V.ConstantVariable(None)
        return self.call_op("call_method", name, [vt, *args], kwargs)

    # -- modules ----------------------------------------------------------------

    def module_getattr(
        self, vt: V.NNModuleVariable, name: str, tx: Any = None
    ) -> V.VariableTracker:
        if name in vt.attrs:
            return vt.attrs[name]
        module, src = vt.value, vt.source
        for table in ("_parameters", "_buffers", "_modules"):
            members = module.__dict__.get(table, {})
            if name in members:
                return self.wrap(members[name], f"{src}.{table}[{name!r}]" if src else None)
        class_attr = V.class_lookup(type(module), name)
        # Python's order: a data descriptor of the class (a property) wins over the instance
        if name in module.__dict__ and not _is_data_descriptor(class_attr):
            if src:
                self.guards.module_attr(src, module, name)
            return self.wrap(module.__dict__[name], f"{src}.{name}" if src else None)
        if isinstance(class_attr, property):  # a data descriptor: no instance attribute wins
            self.guard_class_member(vt, name)  # the class may be given another property
            return self.wrap(class_attr.fget, None).call(tx, [vt], {})
        if class_attr is V.MISSING:
            if hasattr(module, name):  # the class's own ``__getattr__`` answers it
                raise Unsupported(f"{vt.describe()}.{name} comes from a custom __getattr__")
            if src:
                self.guard_module_lacks(vt, name)
            raise Unsupported(f"{type(module).__name__} has no attribute {name!r}")
        if not isinstance(class_attr, (types.FunctionType, staticmethod, classmethod)):
            if hasattr(type(class_attr), "__get__"):
                raise Unsupported(f"{vt.describe()}.{name} is a {type(class_attr).__name__}")
            return self.wrap(class_attr, f"{src}.{name}" if src else None)
        self.guard_class_member(vt, name)
        if name in MODULE_MEMBER_METHODS:
            return V.BoundMethodVariable(vt, name)
        if isinstance(class_attr, staticmethod):
            return self.wrap(class_attr.__func__, None)
        if isinstance(class_attr, classmethod):
            return V.UserMethodVariable(class_attr.__func__, V.ClassVariable(type(module)))
        return V.UserMethodVariable(class_attr, vt)

    def guard_module_lacks(self, vt: V.NNModuleVariable, name: str) -> None:
        """Guard that the module ``vt`` has no attribute ``name``.

        ``not hasattr(module, name)`` costs 1.3-3 us a call (``nn.Module.__getattr__``
        raising its AttributeError), one per layer of a Hugging Face model. Where the
        class looks attributes up as ``nn.Module`` does (object's ``__getattribute__``,
        ``nn.Module``'s ``__getattr__``), the same answer is four dict look-ups and
        checks shared by the class's instances: no class defines ``name``, nor the
        instance's ``__dict__``, nor its parameters, buffers or submodules.
        """
        src = vt.source
        cls = type(vt.value)
        if (
            V.class_lookup(cls, "__getattribute__") is not _OBJECT_GETATTRIBUTE
            or V.class_lookup(cls, "__getattr__") is not _MODULE_GETATTR
        ):
            self.guards.add(f"not hasattr({src}, {name!r})", 2, f"{src} has no {name!r}")
            return
        self.guard_class_member(vt, "__getattribute__")
        self.guard_class_member(vt, "__getattr__")
        self.guard_class_member(vt, name)  # no class defines it, nor the instance's __dict__
        for table in ("_parameters", "_buffers", "_modules"):
            self.guards.add(
                f"{name!r} not in {src}.{table}", 2, f"{src} has no {table[1:-1]} {name!r}"
            )

    def guard_class_member(self, vt: V.VariableTracker, name: str) -> None:
        """``vt.name`` is a method read from the class: guard that no instance attribute of
        that name hides it, and that the class (or a base) still holds the same one
        (classes are patched at run time too). The class is reached through a name bound
        to it: with a source, after guarding the source's type, so that the instances of
        one class (the layers of a model) share one check per member. An object the frame
        made itself has no source (what the frame made it from was guarded where it was
        read)."""
        src = vt.source
        if src:
            if hasattr(vt.value, "__dict__"):
                self.guards.add(
                    f"{name!r} not in {src}.__dict__",
                    2,
                    f"{src} has no instance attribute {name!r}",
                )
            klass = type(vt.value)
            owner = self.guards.type_is(src, klass)
        else:
            klass = vt.python_type()
            owner = self.guards.bind(klass, "cls")
        for i, cls in enumerate(klass.__mro__):
            in_class = f"{owner}.__mro__[{i}].__dict__"
            self.guards.read_once(in_class)
            if name in cls.__dict__:
                described = f"{cls.__qualname__}.__dict__[{name!r}]"
                self.guards.identity(f"{in_class}[{name!r}]", cls.__dict__[name], described)
                return
            self.guards.add(f"{name!r} not in {in_class}", 2, f"{cls.__name__} has no {name!r}")

    def call_module(
        self, tx: Any, vt: V.NNModuleVariable, args: list, kwargs: dict
    ) -> V.VariableTracker:
        module = vt.value
        if call_override(module) is not None:  # runs in place of the hooks and forward
            return self.module_getattr(vt, "__call__", tx).call(tx, args, kwargs)
        if has_call_hooks(module):
            raise Unsupported(f"calling {type(module).__name__} that has hooks")
        src = vt.source
        if src:
            self.guards.add(
                f"not ({src}._forward_hooks or {src}._forward_pre_hooks"
                f" or {src}._backward_hooks or {src}._backward_pre_hooks)",
                2,
                f"{src} has no forward or backward hooks",
            )
        global_hooks = self.guards.bind(torch.nn.modules.module._has_any_global_hook, "hooks")
        self.guards.add(f"not {global_hooks}()", COST_GLOBAL_STATE, "no global module hooks")
        return self.module_getattr(vt, "forward", tx).call(tx, args, kwargs)

    def guard_module_keys(self, vt: V.NNModuleVariable, recurse: bool = False) -> None:
        """Guard the names in ``vt``'s member tables: iterating or indexing a module reads its
        structure, which identity alone does not fix (a layer appended after capture)."""
        if vt.source is None:
            return
        stack = [(vt.value, vt.source)]
        while stack:
            module, source = stack.pop()
            for table in ("_modules", "_parameters", "_buffers"):
                if table in module.__dict__:
                    self.guards.dict_keys(f"{source}.{table}", list(module.__dict__[table]))
            if recurse:
                stack += [
                    (child, f"{source}._modules[{name!r}]")
                    for name, child in module._modules.items()
                    if child is not None
                ]

    def module_children(self, vt: V.NNModuleVariable) -> list[V.VariableTracker]:
        module = vt.value
        self.guard_module_keys(vt)
        if isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList)):
            return [self.module_getattr(vt, name) for name in module._modules]
        if isinstance(module, torch.nn.ModuleDict):
            return [V.ConstantVariable(name) for name in module._modules]
        raise Unsupported(f"iterating over {type(module).__name__}")

    def module_members(self, vt: V.NNModuleVariable, name: str, kwargs: dict) -> V.VariableTracker:
        """``parameters()``, ``named_modules()``... evaluated now; each member read through its path."""
        module = vt.value
        self.guard_class_member(vt, name)
        self.guard_module_keys(vt, recurse=True)
        options = {k: v.as_python_constant() for k, v in kwargs.items()}
        named = name.startswith("named_")
        kind = name.removeprefix("named_")
        table = {"parameters": "_parameters", "buffers": "_buffers"}.get(kind, "_modules")
        if kind in ("parameters", "buffers", "modules"):
            members = list(getattr(module, "named_" + kind)(**options))
        else:
            members = list(module.named_children(**options))
        if vt.source is not None and options.get("remove_duplicate", True):
            if kind == "children":
                every = [(n, c) for n, c in module._modules.items() if c is not None]
            else:
                every = getattr(module, "named_" + kind)(**{**options, "remove_duplicate": False})
            self._guard_shared_members(
                [(_member_source(vt.source, table, path), m) for path, m in every]
            )
        items = []
        for path, member in members:
            source = _member_source(vt.source, table, path) if vt.source else None
            value = self.wrap(member, source)
            items.append(V.TupleVariable([V.ConstantVariable(path), value]) if named else value)
        return V.IteratorVariable(items)

    def _guard_shared_members(self, members: list[tuple[str, Any]]) -> None:
        """A member list without duplicates depends on which members are one object (tied
        weights): guard that the same ones are, and no others."""
        first: dict[int, str] = {}
        for source, member in members:
            if id(member) in first:
                self.guards.add(f"{source} is {first[id(member)]}", 2, f"{source} is shared")
            else:
                first[id(member)] = source
        if len(members) > 1:
            ids = ", ".join(f"id({source})" for source, _ in members)
            self.guards.add(f"len({{{ids}}}) == {len(first)}", 3, f"{len(first)} distinct members")

    def module_getitem(self, vt: V.NNModuleVariable, key: Any) -> V.VariableTracker:
        module = vt.value
        self.guard_module_keys(vt)
        if isinstance(key, slice) and isinstance(
            module, (torch.nn.Sequential, torch.nn.ModuleList)
        ):
            sliced = V.NNModuleVariable(module[key], None)
            picked = list(module._modules)[key]  # a ModuleList slice renumbers its members
            for name, parent_name in zip(sliced.value._modules, picked):
                sliced.attrs[name] = self.module_getattr(vt, parent_name)
            return sliced
        if isinstance(module, torch.nn.ModuleDict) and isinstance(key, str):
            return self.module_getattr(vt, key)
        if isinstance(module, (torch.nn.Sequential, torch.nn.ModuleList)) and isinstance(key, int):
            names = list(module._modules)
            return self.module_getattr(vt, names[key])
        raise Unsupported(f"indexing {type(module).__name__} with {type(key).__name__}")

    def objects_read(self) -> list[tuple[str, Any]]:
        """``(source, object)`` for each object from outside that has a tracker of its own
        (one per object: ``wrap`` gives an object read again its first tracker)."""
        values = {id(value): value for value in self._keepalive}
        return [
            (vt.source, values[key])
            for key, vt in self.by_id.items()
            if vt.source is not None and key in values
        ]

    # -- wrapping real values -------------------------------------------------------

    def wrap(self, value: Any, source: str | None) -> V.VariableTracker:
        """The tracker for a real value read through ``source``, adding the guards it needs."""
        if V.is_constant_value(value):
            if source is not None:
                self.guards.constant(source, value)
            return V.ConstantVariable(value, source)
        known = self.by_id.get(id(value))
        if known is not None:
            if source is not None and known.source is not None and source != known.source:
                self.guards.add(f"{source} is {known.source}", 1, f"{source} is {known.source}")
            return known
        owner = self.dict_owners.get(id(value))
        if owner is not None and (owner.attrs or owner.deleted):
            # two trackers of one dict would each miss the other's writes
            raise Unsupported(
                f"the __dict__ of {owner.describe()}, whose attributes the frame changed"
            )
        if source is None and isinstance(value, torch.Tensor):
            source = self.guards.bind(value, "tensor")
        vt = build(self, value, source)
        if not isinstance(vt, V.ConstantVariable):
            self.by_id[id(value)] = vt
            self._keepalive.append(value)
        if isinstance(vt, V.UserObjectVariable) and isinstance(
            getattr(value, "__dict__", None), dict
        ):
            self.dict_owners[id(value.__dict__)] = vt
        return vt


# ops that address their input's storage at an explicit offset: the offset's position
_STORAGE_OFFSET_POSITION = {"as_strided": 3, "as_strided_": 3}


def _member_source(source: str, table: str, path: str) -> str:
    """The source of member ``path`` (``'a.b.weight'``) of the module read through ``source``."""
    parts = [p for p in path.split(".") if p]
    for i, part in enumerate(parts):
        source += f".{table if i == len(parts) - 1 else '_modules'}[{part!r}]"
    return source


#: The types of symbolic values fake propagation computes (sizes of dynamic inputs).
SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _contains_symbolic(value: Any) -> bool:
    """Whether ``value`` is or holds a symbolic value the ShapeEnv has not reduced to a number."""
    if isinstance(value, SYM_TYPES):
        return not value.node.expr.is_number
    if isinstance(value, (list, tuple)):
        return any(_contains_symbolic(v) for v in value)
    return False


def _contains_sym(value: Any) -> bool:
    """Whether ``value`` is or holds a SymInt, SymFloat or SymBool (symbolic or now known)."""
    if isinstance(value, (list, tuple)):
        return any(_contains_sym(v) for v in value)
    return isinstance(value, SYM_TYPES)


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains_tensor(v) for v in value)
    return False


def is_plain_result(value: Any) -> bool:
    if V.is_constant_value(value):
        return True
    return isinstance(value, (list, tuple)) and all(is_plain_result(v) for v in value)


def _fields_of(value: tuple) -> tuple[str, ...] | None:
    fields = getattr(type(value), "_fields", None)
    if fields is not None:
        return tuple(fields)
    if hasattr(type(value), "n_fields"):  # torch.return_types structseq
        names = [
            n
            for n in dir(type(value))
            if isinstance(getattr(type(value), n), types.MemberDescriptorType)
        ]
        by_position = {}
        for n in names:
            attr = getattr(value, n)
            for i, item in enumerate(value):
                if item is attr:
                    by_position[i] = n
        return tuple(by_position.get(i, f"_{i}") for i in range(len(value)))
    return None


def to_node(vt: Any) -> Any:
    """The FX argument for a tracker: a node for tensors, the value for constants."""
    if isinstance(vt, (V.TensorVariable, V.SymNodeVariable)):
        return vt.node
    if isinstance(vt, V.ConstantVariable):
        return vt.value
    if isinstance(vt, V.TupleVariable):
        return tuple(to_node(i) for i in vt.items)
    if isinstance(vt, V.ListVariable):
        return [to_node(i) for i in vt.items]
    if isinstance(vt, V.SliceVariable):
        return slice(*(to_node(p) for p in vt.parts))
    if isinstance(vt, V.DictVariable):
        return {k: to_node(v) for k, v in vt.items.items()}
    raise Unsupported(f"passing {vt.describe()} to a torch operation")


def to_fake(vt: Any) -> Any:
    if isinstance(vt, V.TensorVariable):
        return vt.example
    if isinstance(vt, V.SymNodeVariable):
        return vt.value
    if isinstance(vt, V.ConstantVariable):
        return vt.value
    if isinstance(vt, V.TupleVariable):
        return tuple(to_fake(i) for i in vt.items)
    if isinstance(vt, V.ListVariable):
        return [to_fake(i) for i in vt.items]
    if isinstance(vt, V.SliceVariable):
        return slice(*(to_fake(p) for p in vt.parts))
    if isinstance(vt, V.DictVariable):
        return {k: to_fake(v) for k, v in vt.items.items()}
    raise Unsupported(f"passing {vt.describe()} to a torch operation")


def _is_data_descriptor(value: Any) -> bool:
    """Whether a class attribute takes precedence over an instance's ``__dict__``."""
    return value is not V.MISSING and (
        hasattr(type(value), "__set__") or hasattr(type(value), "__delete__")
    )


#: How ``nn.Module`` instances look attributes up (``guard_module_lacks``).
_OBJECT_GETATTRIBUTE = object.__dict__["__getattribute__"]
_MODULE_GETATTR = torch.nn.Module.__dict__["__getattr__"]
