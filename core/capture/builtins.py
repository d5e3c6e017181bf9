"""Calls to builtins, ``math``/``operator`` functions and classes, evaluated at capture time.

Python-only computation (arithmetic on constants, ``len``, ``isinstance``,
``range``, ``zip``...) runs now and its result becomes a constant of the
entry (valid because the inputs it came from are guarded). Operations that
involve tensors go to the graph; those that would need a tensor's *value*
raise ``Unsupported``.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import types
from typing import TYPE_CHECKING, Any

import torch

from torchkiln.capture import polyfills
from torchkiln.capture import variables as V
from torchkiln.capture.builder import is_pure_builtin
from torchkiln.exc import Unsupported

if TYPE_CHECKING:
    from torchkiln.capture.translator import Translator


def fold(fn: Any, *args: Any, **kwargs: Any) -> V.VariableTracker:
    """Call ``fn`` on real constants now; the result must be a constant too."""
    try:
        result = fn(*args, **kwargs)
    except Exception as e:
        raise Unsupported(
            f"{getattr(fn, '__name__', fn)} raised {type(e).__name__}: {e} while tracing"
        ) from e
    return constant_result(result)


def constant_result(result: Any) -> V.VariableTracker:
    if V.is_constant_value(result):
        return V.ConstantVariable(result)
    if type(result) is list:
        return V.ListVariable([constant_result(r) for r in result])
    if type(result) is dict:
        return V.DictVariable({k: constant_result(v) for k, v in result.items()})
    if type(result) is set:
        return V.SetVariable(result)  # a set C code computed: its table is the real one
    if type(result) is tuple:
        return V.TupleVariable([constant_result(r) for r in result])
    raise Unsupported(f"a Python computation returned a {type(result).__name__}")


def class_value(vt: V.VariableTracker) -> Any:
    """The class (or tuple of classes) a tracker stands for, for ``isinstance``."""
    if isinstance(vt, V.ValueVariable) and isinstance(vt.value, type):
        return vt.value
    if isinstance(vt, V.TupleVariable):
        return tuple(class_value(i) for i in vt.items)
    if isinstance(vt, V.ConstantVariable) and isinstance(vt.value, tuple):
        return vt.value
    raise Unsupported(f"isinstance with {vt.describe()} as the class")


def _all_constant(args: list, kwargs: dict) -> bool:
    return all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values())


def _consts(args: list) -> list:
    return [a.as_python_constant() for a in args]


def call_builtin(tx: Translator, fn: Any, args: list, kwargs: dict) -> V.VariableTracker:
    if any(isinstance(a, V.SymNodeVariable) for a in [*args, *kwargs.values()]):
        if fn is int and len(args) == 1 and args[0].python_type() is int:
            return args[0]
        if getattr(fn, "__module__", None) not in ("_operator", "operator"):
            # Python needs the value: the size is specialized (with a guard)
            args = [_specialized(a) for a in args]
            kwargs = {k: _specialized(v) for k, v in kwargs.items()}
    handler = _HANDLERS.get(fn)
    if handler is not None:
        return handler(tx, *args, **kwargs)
    if polyfills.stand_in(fn) is not None:
        return call_polyfill(tx, fn, args, kwargs)
    if isinstance(fn, polyfills.GETTER_TYPES):
        return _call_getter(tx, fn, args, kwargs)
    if _all_constant(args, kwargs) and is_pure_builtin(fn):
        return fold(fn, *_consts(args), **{k: v.as_python_constant() for k, v in kwargs.items()})
    if getattr(fn, "__module__", None) in ("_operator", "operator") and not kwargs:
        if any(isinstance(a, V.TensorVariable) for a in args):
            return tx.output.call_op("call_function", fn, args, {})
        symbol = _OPERATOR_SYMBOLS.get(getattr(fn, "__name__", ""))
        if symbol is not None and len(args) == 2:
            return tx.binary_op(symbol, args[0], args[1])
        if fn is operator.getitem:
            return tx.subscript(args[0], args[1])
    if is_pure_builtin(fn) and fn not in _MUTATING_OPERATORS:
        return _fold_reading(tx, fn, args, kwargs)
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    raise Unsupported(f"builtin {name}() with non-constant arguments")


#: ``operator`` functions that change their first argument: never run on a copy of it.
_MUTATING_OPERATORS = frozenset(
    getattr(operator, name)
    for name in dir(operator)
    if name in ("setitem", "delitem") or (name.startswith("i") and name[1:] in dir(operator))
)


def _specialized(vt: V.VariableTracker) -> V.VariableTracker:
    if isinstance(vt, V.SymNodeVariable):
        return V.ConstantVariable(vt.as_python_constant())
    return vt


def _consumes_iterable(fn: Any) -> bool:
    """A pure function that runs an iterable argument to its end (an iterator is, first)."""
    if fn in (math.prod, math.fsum):
        return True
    return getattr(fn, "__name__", "") == "join" and type(getattr(fn, "__self__", None)) in (
        str,
        bytes,
    )


def _fold_reading(tx: Translator, fn: Any, args: list, kwargs: dict) -> V.VariableTracker:
    """``fn`` on real copies of lists, tuples and dicts of constants (``math.prod([n, 2])``,
    ``"-".join(parts)``): it only reads them, and its result must be immutable, so that no
    copy is seen again."""
    if _consumes_iterable(fn):
        args = [
            V.ListVariable(a.unpack(tx)) if isinstance(a, V.IteratorVariable) else a for a in args
        ]
    values = [*args, *kwargs.values()]
    if not all(V.has_real_value(a) for a in values):
        name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
        raise Unsupported(f"builtin {name}() with non-constant arguments")
    result = fold(fn, *map(V.real_value, args), **{k: V.real_value(v) for k, v in kwargs.items()})
    if not isinstance(result, V.ConstantVariable):
        raise Unsupported(f"{fn.__name__}() returned a mutable value built from a container")
    return result


def call_polyfill(tx: Translator, fn: Any, args: list, kwargs: dict) -> V.VariableTracker:
    """A C iteration helper (``itertools.chain``, ``functools.reduce``...): its Python stand-in
    is inlined; over constants only, a finite one is computed now."""
    if fn in polyfills.FOLDED and _all_constant(args, kwargs):
        items = fold(lambda *a, **k: list(fn(*a, **k)), *_consts(args), **_const_kwargs(kwargs))
        return V.IteratorVariable(items.items)
    return tx.inline_call(polyfills.POLYFILLS[fn], args, kwargs)


def _call_getter(tx: Translator, getter: Any, args: list, kwargs: dict) -> V.VariableTracker:
    """A real ``operator.itemgetter``/``attrgetter``/``methodcaller``: the stand-in is made with
    the getter's own arguments (fixed by its identity guard), then called."""
    cls, made_with, made_with_kw = polyfills.getter_arguments(getter)
    if not all(V.is_constant_value(v) for v in (*made_with, *made_with_kw.values())):
        raise Unsupported(f"calling an operator.{cls.__name__} made with non-constant arguments")
    stand_in = tx.inline_call(
        polyfills.POLYFILLS[cls],
        [V.ConstantVariable(v) for v in made_with],
        {k: V.ConstantVariable(v) for k, v in made_with_kw.items()},
    )
    return tx.call_function(stand_in, args, kwargs)


def _const_kwargs(kwargs: dict) -> dict:
    return {k: v.as_python_constant() for k, v in kwargs.items()}


_OPERATOR_SYMBOLS = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
    "pow": "**", "matmul": "@", "and_": "&", "or_": "|", "xor": "^", "lshift": "<<", "rshift": ">>",
    "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
}  # fmt: skip


def _len(tx: Translator, obj: V.VariableTracker) -> V.VariableTracker:
    if isinstance(obj, V.TensorVariable):
        if obj.example.dim() == 0:
            raise Unsupported("len() of a 0-d tensor")
        return tx.output.call_op("call_method", "size", [obj, V.ConstantVariable(0)], {})
    if isinstance(obj, (V.ContainerVariable, V.DictVariable)):
        return V.ConstantVariable(len(obj.items))
    if isinstance(obj, V.SetVariable):
        return V.ConstantVariable(len(obj.mirror))
    if isinstance(obj, V.DictViewVariable):
        return V.ConstantVariable(len(obj.mapping.items))
    if isinstance(obj, V.NNModuleVariable):
        return V.ConstantVariable(len(tx.output.module_children(obj)))
    if obj.is_constant():
        return fold(len, obj.as_python_constant())
    return tx.call_function(tx.getattr(obj, "__len__"), [], {})


def _isinstance(
    tx: Translator, obj: V.VariableTracker, cls: V.VariableTracker
) -> V.VariableTracker:
    klass = class_value(cls)
    ptype = obj.python_type()
    if isinstance(obj, V.TensorVariable) and not obj.source:
        return V.ConstantVariable(issubclass(torch.Tensor, klass))
    return V.ConstantVariable(issubclass(ptype, klass))


def _issubclass(
    tx: Translator, cls: V.VariableTracker, classinfo: V.VariableTracker
) -> V.VariableTracker:
    return fold(issubclass, class_value(cls), class_value(classinfo))


def _iter_items(tx: Translator, obj: V.VariableTracker) -> list[V.VariableTracker]:
    return tx.unpack_iterable(obj)


def _enumerate(
    tx: Translator, it: V.VariableTracker, start: V.VariableTracker | None = None
) -> V.VariableTracker:
    first = start.as_python_constant() if start is not None else 0
    return V.EnumerateVariable(it.make_iterator(tx), first)


def _zip(
    tx: Translator, *its: V.VariableTracker, strict: V.VariableTracker | None = None
) -> V.VariableTracker:
    strict_value = bool(strict.as_python_constant()) if strict is not None else False
    return V.ZipVariable([it.make_iterator(tx) for it in its], strict_value)


def _list(tx: Translator, it: V.VariableTracker | None = None) -> V.VariableTracker:
    return V.ListVariable(_iter_items(tx, it) if it is not None else [])


def _tuple(tx: Translator, it: V.VariableTracker | None = None) -> V.VariableTracker:
    return V.TupleVariable(_iter_items(tx, it) if it is not None else [])


def _dict(
    tx: Translator, arg: V.VariableTracker | None = None, **kwargs: V.VariableTracker
) -> V.VariableTracker:
    items: dict = {}
    V.containers.update_items(tx, items, arg, kwargs)
    return V.DictVariable(items)


def _set(tx: Translator, it: V.VariableTracker | None = None) -> V.VariableTracker:
    return V.sets.construct(tx, set, it)


def _frozenset(tx: Translator, it: V.VariableTracker | None = None) -> V.VariableTracker:
    return V.sets.construct(tx, frozenset, it)


def _iter(tx: Translator, it: V.VariableTracker) -> V.VariableTracker:
    return it.make_iterator(tx)


def _next(
    tx: Translator, it: V.VariableTracker, default: V.VariableTracker | None = None
) -> V.VariableTracker:
    if isinstance(it, V.UserObjectVariable) and it.defines("__next__"):
        it = V.iterators.UserIteratorVariable(it)
    if not isinstance(it, V.IteratorVariable):
        raise Unsupported(f"next() on {it.describe()}")
    value = it.next(tx)
    if value is None:
        if default is None:
            raise V.exceptions.error(StopIteration, reason="next() on an exhausted iterator")
        return default
    return value


def _reversed(tx: Translator, it: V.VariableTracker) -> V.VariableTracker:
    return V.IteratorVariable(list(reversed(_iter_items(tx, it))))


def _min_max(fn: Any) -> Any:
    def handler(
        tx: Translator,
        *args: V.VariableTracker,
        key: V.VariableTracker | None = None,
        default: V.VariableTracker | None = None,
    ) -> V.VariableTracker:
        """The first item whose key is smallest (largest), keys computed as items come; the
        items themselves may be anything (``max(tensors, key=lambda t: t.numel())``)."""
        if not args or (len(args) > 1 and default is not None):
            raise Unsupported(f"{fn.__name__}() with these arguments raises TypeError")
        iterator = (V.TupleVariable(list(args)) if len(args) > 1 else args[0]).make_iterator(tx)
        no_key = key is None or (key.is_constant() and key.as_python_constant() is None)
        items, keys = [], []
        while (item := iterator.next(tx)) is not None:
            items.append(item)
            keys.append(item if no_key else tx.call_function(key, [item], {}))
        if not items and default is not None:
            return default
        if any(isinstance(k, V.TensorVariable) for k in keys):
            raise Unsupported(
                f"{fn.__name__}() over tensors compares their values (data-dependent)"
            )
        values = _consts(keys)
        best = fold(fn, range(len(items)), key=values.__getitem__).as_python_constant()
        return items[best]

    return handler


def _sum(
    tx: Translator, it: V.VariableTracker, start: V.VariableTracker | None = None
) -> V.VariableTracker:
    total = start if start is not None else V.ConstantVariable(0)
    for item in _iter_items(tx, it):
        total = tx.binary_op("+", total, item)
    return total


def _any_all(fn: Any) -> Any:
    def handler(tx: Translator, it: V.VariableTracker) -> V.VariableTracker:
        """Stops at the first item that decides, leaving an iterator's rest unconsumed."""
        iterator = it.make_iterator(tx)
        truths = iter(lambda: iterator.next(tx), None)
        return V.ConstantVariable(fn(item.truth(tx) for item in truths))

    return handler


def _abs(tx: Translator, x: V.VariableTracker) -> V.VariableTracker:
    if isinstance(x, V.TensorVariable):
        return tx.output.call_op("call_function", torch.abs, [x], {})
    if isinstance(x, V.UserObjectVariable):
        return V.dunders.unary(tx, x, "__abs__")
    return fold(abs, x.as_python_constant())


def _hash(tx: Translator, x: V.VariableTracker) -> V.VariableTracker:
    if isinstance(x, V.UserObjectVariable):
        return V.dunders.hash_of(tx, x)
    return _fold_reading(tx, hash, [x], {})


def _bool(tx: Translator, *args: V.VariableTracker) -> V.VariableTracker:
    """``bool(obj)`` runs the class's ``__bool__`` or ``__len__``; other values fold."""
    if len(args) == 1 and isinstance(args[0], V.UserObjectVariable):
        return V.ConstantVariable(tx.truth(args[0]))
    return _scalar(bool)(tx, *args)


def _getattr(
    tx: Translator,
    obj: V.VariableTracker,
    name: V.VariableTracker,
    default: V.VariableTracker | None = None,
) -> V.VariableTracker:
    try:
        return tx.getattr(obj, name.as_python_constant())
    except Unsupported as e:
        if default is not None and V.is_missing_attribute(e):
            return default
        raise


def _hasattr(tx: Translator, obj: V.VariableTracker, name: V.VariableTracker) -> V.VariableTracker:
    return V.ConstantVariable(obj.has_attribute(tx, name.as_python_constant()))


def _setattr(
    tx: Translator, obj: V.VariableTracker, name: V.VariableTracker, value: V.VariableTracker
) -> V.VariableTracker:
    tx.store_attr(obj, name.as_python_constant(), value)
    return V.ConstantVariable(None)


def _delattr(tx: Translator, obj: V.VariableTracker, name: V.VariableTracker) -> V.VariableTracker:
    tx.delete_attr(obj, name.as_python_constant())
    return V.ConstantVariable(None)


def _type(tx: Translator, obj: V.VariableTracker) -> V.VariableTracker:
    return tx.output.wrap(obj.python_type(), None)


def _callable(tx: Translator, obj: V.VariableTracker) -> V.VariableTracker:
    """Whether the object's type defines ``__call__``, as ``callable`` checks; the type is
    guarded wherever the object came from."""
    if obj.is_constant():
        return V.ConstantVariable(callable(obj.as_python_constant()))
    return V.ConstantVariable(V.class_lookup(obj.python_type(), "__call__") is not V.MISSING)


def _scalar(fn: Any) -> Any:
    def handler(
        tx: Translator, *args: V.VariableTracker, **kwargs: V.VariableTracker
    ) -> V.VariableTracker:
        if any(isinstance(a, V.TensorVariable) for a in args):
            raise Unsupported(f"{fn.__name__}() of a tensor needs its value (data-dependent)")
        return fold(fn, *_consts(args), **{k: v.as_python_constant() for k, v in kwargs.items()})

    return handler


def _text(fn: Any, otherwise: Any) -> Any:
    """``str()``/``repr()``: of a user object, its class's ``__str__``/``__repr__`` (an
    exception's text comes from its arguments, as its model in ``exceptions`` gives it)."""

    def handler(
        tx: Translator, *args: V.VariableTracker, **kwargs: V.VariableTracker
    ) -> V.VariableTracker:
        if (
            len(args) == 1
            and not kwargs
            and isinstance(args[0], V.UserObjectVariable)
            and not isinstance(args[0], V.exceptions.ExceptionVariable)
        ):
            return V.dunders.text(tx, args[0], f"__{fn.__name__}__")
        return otherwise(tx, *args, **kwargs)

    return handler


def _sorted(
    tx: Translator,
    it: V.VariableTracker,
    key: V.VariableTracker | None = None,
    reverse: V.VariableTracker | None = None,
) -> V.VariableTracker:
    items = _iter_items(tx, it)
    if key is None or (key.is_constant() and key.as_python_constant() is None):
        keys = _consts(items)
    else:
        keys = [tx.call_function(key, [item], {}).as_python_constant() for item in items]
    order = sorted(
        range(len(items)),
        key=lambda i: keys[i],
        reverse=bool(reverse and reverse.as_python_constant()),
    )
    return V.ListVariable([items[i] for i in order])


def _map(tx: Translator, fn: V.VariableTracker, *its: V.VariableTracker) -> V.VariableTracker:
    return V.MapVariable(fn, [it.make_iterator(tx) for it in its])


def _filter(tx: Translator, fn: V.VariableTracker, it: V.VariableTracker) -> V.VariableTracker:
    return V.FilterVariable(fn, it.make_iterator(tx))


def object_init(*args: Any) -> None:
    """``object.__init__`` reached through ``super().__init__()`` (``SuperVariable``): nothing to do."""


def _object_init(
    tx: Translator, *args: V.VariableTracker, **kwargs: V.VariableTracker
) -> V.VariableTracker:
    return V.ConstantVariable(None)


def _object_new(
    tx: Translator, cls: V.VariableTracker, *args: V.VariableTracker, **kwargs: V.VariableTracker
) -> V.VariableTracker:
    """``object.__new__(cls)`` (``super().__new__(cls)`` in a ``__new__``): a new object."""
    klass = class_value(cls)
    if not _is_plain_user_class(klass):
        raise Unsupported(f"object.__new__ of {klass.__qualname__}")
    return V.UserObjectVariable(None, cls=klass)


#: The C types whose ``__new__`` a user subclass's ``__new__`` calls (``super().__new__(cls)``).
NATIVE_NEWS = (list, tuple, set, frozenset)


def _native_new(native: type) -> Any:
    def handler(
        tx: Translator, cls: V.VariableTracker, *args: V.VariableTracker, **kwargs: Any
    ) -> V.VariableTracker:
        return V.builtin_subclasses.new_instance(tx, native, class_value(cls), list(args), kwargs)

    return handler


def _print(tx: Translator, *args: Any, **kwargs: Any) -> V.VariableTracker:
    raise Unsupported("print() writes output")


def _unsupported(name: str) -> Any:
    def handler(tx: Translator, *args: Any, **kwargs: Any) -> V.VariableTracker:
        raise Unsupported(f"{name}()")

    return handler


_HANDLERS: dict[Any, Any] = {
    len: _len,
    isinstance: _isinstance,
    issubclass: _issubclass,
    enumerate: _enumerate,
    zip: _zip,
    list: _list,
    tuple: _tuple,
    dict: _dict,
    set: _set,
    frozenset: _frozenset,
    iter: _iter,
    next: _next,
    reversed: _reversed,
    min: _min_max(min),
    max: _min_max(max),
    sum: _sum,
    any: _any_all(any),
    all: _any_all(all),
    abs: _abs,
    getattr: _getattr,
    hasattr: _hasattr,
    setattr: _setattr,
    delattr: _delattr,
    hash: _hash,
    type: _type,
    callable: _callable,
    int: _scalar(int),
    float: _scalar(float),
    bool: _bool,
    str: _text(str, _scalar(str)),
    repr: _text(repr, lambda tx, *args, **kwargs: _fold_reading(tx, repr, list(args), kwargs)),
    sorted: _sorted,
    map: _map,
    filter: _filter,
    object_init: _object_init,
    object.__new__: _object_new,
    print: _print,
    id: _unsupported("id"),
    input: _unsupported("input"),
    open: _unsupported("open"),
    math.floor: _scalar(math.floor),
    math.ceil: _scalar(math.ceil),
    math.sqrt: _scalar(math.sqrt),
    **{native.__new__: _native_new(native) for native in NATIVE_NEWS},
}


def _signature(
    tx: Translator, fn: V.VariableTracker, **kwargs: V.VariableTracker
) -> V.VariableTracker:
    """``inspect.signature(fn)``: a constant, as ``fn`` is fixed by its identity guard (or by
    the guarded object whose class it was read from). A bound method's signature does not
    depend on the object it is bound to, so any object stands in for it."""
    if isinstance(fn, V.UserFunctionVariable):
        target = fn.value
    elif isinstance(fn, V.UserMethodVariable) and isinstance(fn.fn, types.FunctionType):
        target = types.MethodType(fn.fn, object())
    else:
        raise Unsupported(f"inspect.signature of {fn.describe()}")
    return fold(inspect.signature, target, **{k: v.as_python_constant() for k, v in kwargs.items()})


#: Standard-library functions written in Python that are modelled here instead of inlined.
PYTHON_FUNCTIONS: dict[Any, Any] = {inspect.signature: _signature}


def python_function(fn: Any) -> Any:
    """The model of standard-library function ``fn`` (here, for ``dataclasses`` in ``records``,
    for ``collections`` in ``collection_types``), or None: then it is inlined."""
    for table in (
        PYTHON_FUNCTIONS,
        V.records.PYTHON_FUNCTIONS,
        V.mappings.PYTHON_FUNCTIONS,
        V.collection_types.PYTHON_FUNCTIONS,
        V.assertions.PYTHON_FUNCTIONS,
        V.functions.PYTHON_FUNCTIONS,
    ):
        if fn in table:
            return table[fn]
    return None


def _is_plain_user_class(cls: type) -> bool:
    """A Python class whose instances are plain objects: no base but ``object`` has a
    ``__new__`` other than one in Python, and its metaclass calls ``__new__`` and ``__init__``
    as ``type`` does."""
    if cls.__module__ in ("builtins",) or cls.__module__.startswith("torch"):
        return False
    if issubclass(cls, (torch.nn.Module, BaseException, torch.Tensor)):
        return False
    if V.class_lookup(type(cls), "__call__") is not type.__call__:
        return False
    return all(_python_new(k) is not False for k in cls.__mro__[:-1])


def _python_new(cls: type) -> types.FunctionType | bool | None:
    """The ``__new__`` ``cls`` itself defines in Python, None if it defines none, False for any
    other kind."""
    new = cls.__dict__.get("__new__")
    if new is None:
        return None
    if isinstance(new, staticmethod) and isinstance(new.__func__, types.FunctionType):
        return new.__func__
    return False


def _construct_object(tx: Translator, cls: type, args: list, kwargs: dict) -> V.VariableTracker:
    """``type.__call__``: ``__new__`` (a Python one inlined), then ``__init__`` if it made an
    instance of ``cls``."""
    new = next((n for n in map(_python_new, cls.__mro__[:-1]) if n is not None), None)
    if new is None:
        obj = V.UserObjectVariable(None, cls=cls)
        if V.class_lookup(cls, "__init__") is object.__init__ and (args or kwargs):
            raise Unsupported(f"{cls.__name__}() takes no arguments")
    else:
        obj = tx.inline_call(new, [V.ClassVariable(cls), *args], kwargs)
        if not (isinstance(obj, V.UserObjectVariable) and issubclass(obj.python_type(), cls)):
            return obj
    init = V.class_lookup(cls, "__init__")
    if isinstance(init, types.FunctionType):
        tx.inline_call(init, [obj, *args], kwargs)
    return obj


def construct_class(tx: Translator, cls: type, args: list, kwargs: dict) -> V.VariableTracker:
    """``cls(*args)`` for builtin containers, namedtuples, dataclasses and torch value types."""
    if cls in _HANDLERS:
        return _HANDLERS[cls](tx, *args, **kwargs)
    for constructors in (
        V.collection_types.CONSTRUCTORS,
        V.chainmap.CONSTRUCTORS,
        V.context_managers.CONSTRUCTORS,
    ):
        if cls in constructors:
            return constructors[cls](tx, *args, **kwargs)
    if polyfills.stand_in(cls) is not None:
        return call_polyfill(tx, cls, args, kwargs)
    if cls in (range, slice, complex, bytes) or cls in (
        torch.Size,
        torch.device,
        torch.dtype,
        torch.finfo,
        torch.iinfo,
    ):
        if cls is torch.Size and args and not args[0].is_constant():
            return V.ConstantVariable(torch.Size(_consts(tx.unpack_iterable(args[0]))))
        return fold(cls, *_consts(args), **{k: v.as_python_constant() for k, v in kwargs.items()})
    if cls is torch.no_grad:
        return V.GradModeVariable(False)
    if cls is torch.enable_grad:
        return V.GradModeVariable(True)
    if cls is torch.set_grad_enabled:
        mode = (args[0] if args else kwargs["mode"]).as_python_constant()
        prev = tx.output.grad_enabled
        tx.output.set_grad_enabled(bool(mode))
        return V.GradModeVariable(bool(mode), prev=prev)
    if cls is functools.partial:
        return V.PartialVariable(args[0], list(args[1:]), dict(kwargs))
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        defaults = getattr(cls, "_field_defaults", {})
        values = dict(zip(cls._fields, args))
        values.update(kwargs)
        missing = [f for f in cls._fields if f not in values and f not in defaults]
        if missing:
            raise Unsupported(f"{cls.__name__}() missing fields {missing}")
        items = [
            values[f] if f in values else tx.output.wrap(defaults[f], None) for f in cls._fields
        ]
        return V.TupleVariable(items, cls=cls, fields=tuple(cls._fields))
    if V.builtin_subclasses.native_type(cls) is not None:
        return V.builtin_subclasses.construct(tx, cls, args, kwargs)
    if V.records.builds_natively(cls):
        return V.records.construct(tx, cls, args, kwargs)
    if _is_plain_user_class(cls):
        return _construct_object(tx, cls, args, kwargs)
    if issubclass(cls, BaseException):
        return V.exceptions.construct(tx, cls, args, kwargs)
    if issubclass(cls, torch.nn.Module):
        return V.nn_modules.construct(tx, cls, args, kwargs)
    raise Unsupported(f"constructing a {cls.__qualname__} object")
