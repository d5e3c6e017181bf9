"""Variable trackers: what the translator knows about each stack slot and local.

Every value the symbolic interpreter handles is a ``VariableTracker``. A
tracker knows the Python type of the value it stands for, how to read its
attributes, call it, iterate over it, and (through ``codegen.reconstruct``)
how to rebuild the real value after the graph ran. ``source`` is the Python
expression, valid in the guard and transformed functions, that reads the
real value at call time; trackers without a source were created by the
frame itself.

Behaviour that needs the translator (graph ops, inlining) receives ``tx``.

One module per family:

| module | trackers |
|---|---|
| ``base`` | the protocol (``VariableTracker``), ``NULL``, ``ValueVariable`` (held by identity), ``IteratorVariable``, ``class_lookup`` |
| ``constants`` | immutable values (``ConstantVariable``), slices with traced bounds |
| ``tensors`` | ``TensorVariable``, guards on tensor state read in the frame, symbolic sizes (``SymNodeVariable``) |
| ``containers`` | lists, tuples, dicts, mapping proxies, dict views |
| ``sets`` | sets and frozensets, iterated in CPython's own order |
| ``collection_types`` | ``collections``: ``OrderedDict``, ``defaultdict``, ``Counter``, ``deque`` |
| ``iterators`` | iterators over containers, ``map``/``filter``/``zip``/``enumerate``, generators |
| ``functions`` | builtins, user and nested functions, methods, ``partial``, closure cells |
| ``context_managers`` | ``contextlib`` managers, user ``__enter__``/``__exit__`` (grad mode: ``torch_objects``) |
| ``exceptions`` | exceptions raised in traced code and ``Raised``, which carries one to its handler |
| ``objects`` | Python modules, classes, user objects, ``super()`` |
| ``descriptors`` | properties, slots and Python descriptors on a user object's class |
| ``dunders`` | operators, ``hash`` where an operand is a user object |
| ``assertions`` | ``unittest.TestCase.assert*`` called in traced code |
| ``records`` | dataclasses and dict-backed user objects (``ModelOutput``), ``dataclasses.fields``... |
| ``mappings`` | ``collections.abc.Mapping`` subclasses: their views, ``dict(obj)`` and ``**obj`` |
| ``chainmap`` | ``collections.ChainMap`` |
| ``builtin_subclasses`` | user subclasses of ``list``, ``tuple``, ``set``, ``frozenset``, ``dict``: items in a native tracker |
| ``opaque`` | objects not traced into (C functions, TorchScript...) |
| ``lookups`` | C methods and mapping lookups on real objects, answered at capture time |
| ``nn_modules`` | ``nn.Module`` instances |
| ``torch_objects`` | torch callables, grad-mode context managers |

Families build each other's trackers (a constant's method is a builtin, a
list's iterator is an iterator), so they import each other as modules and
read the names when called; only ``base`` is imported by name, and it imports
no family. Import order therefore does not matter.
"""

from torchkiln.capture.variables.base import (
    MISSING,
    NULL,
    IteratorVariable,
    ValueVariable,
    VariableTracker,
    class_lookup,
    is_missing_attribute,
)
from torchkiln.capture.variables.collection_types import (
    CounterVariable,
    DefaultDictVariable,
    DequeVariable,
    OrderedDictVariable,
)
from torchkiln.capture.variables.constants import (
    CONSTANT_TYPES,
    ConstantVariable,
    SliceVariable,
    has_real_value,
    is_constant_value,
    real_value,
)
from torchkiln.capture.variables.containers import (
    ContainerVariable,
    DictVariable,
    DictViewVariable,
    ListVariable,
    TupleVariable,
)
from torchkiln.capture.variables.context_managers import NullContextVariable
from torchkiln.capture.variables.exceptions import ExceptionVariable, Raised
from torchkiln.capture.variables.functions import (
    BoundMethodVariable,
    BuiltinVariable,
    CellVariable,
    NestedFunctionVariable,
    PartialVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from torchkiln.capture.variables.iterators import (
    EnumerateVariable,
    FilterVariable,
    GeneratorVariable,
    MapVariable,
    ZipVariable,
)
from torchkiln.capture.variables.lookups import literal_repr
from torchkiln.capture.variables.mappings import MappingViewVariable, merged_items
from torchkiln.capture.variables.nn_modules import FrameModuleVariable, NNModuleVariable
from torchkiln.capture.variables.objects import (
    ClassVariable,
    PythonModuleVariable,
    SuperVariable,
    UserObjectVariable,
)
from torchkiln.capture.variables.opaque import OpaqueVariable, TorchScriptVariable
from torchkiln.capture.variables.records import DictObjectVariable, FieldVariable
from torchkiln.capture.variables.sets import SetVariable
from torchkiln.capture.variables.tensors import (
    SymNodeVariable,
    TensorVariable,
    guard_tensor_state,
)
from torchkiln.capture.variables.torch_objects import (
    GradModeDecoratedVariable,
    GradModeExitVariable,
    GradModeVariable,
    TorchFunctionVariable,
)

# isort: split
# families read as ``V.<module>``, imported once the classes they use exist
from torchkiln.capture.variables import (  # noqa: F401
    assertions,
    builtin_subclasses,
    chainmap,
    descriptors,
    dunders,
    numpy_arrays,
)

__all__ = [
    "CONSTANT_TYPES",
    "MISSING",
    "NULL",
    "BoundMethodVariable",
    "BuiltinVariable",
    "CellVariable",
    "ClassVariable",
    "ConstantVariable",
    "ContainerVariable",
    "CounterVariable",
    "DefaultDictVariable",
    "DequeVariable",
    "DictObjectVariable",
    "DictVariable",
    "DictViewVariable",
    "EnumerateVariable",
    "ExceptionVariable",
    "FieldVariable",
    "FilterVariable",
    "FrameModuleVariable",
    "GeneratorVariable",
    "GradModeDecoratedVariable",
    "GradModeExitVariable",
    "GradModeVariable",
    "IteratorVariable",
    "ListVariable",
    "MapVariable",
    "MappingViewVariable",
    "NNModuleVariable",
    "NestedFunctionVariable",
    "NullContextVariable",
    "OpaqueVariable",
    "OrderedDictVariable",
    "PartialVariable",
    "PythonModuleVariable",
    "Raised",
    "SetVariable",
    "SliceVariable",
    "SuperVariable",
    "SymNodeVariable",
    "TensorVariable",
    "TorchFunctionVariable",
    "TorchScriptVariable",
    "TupleVariable",
    "UserFunctionVariable",
    "UserMethodVariable",
    "UserObjectVariable",
    "ValueVariable",
    "VariableTracker",
    "ZipVariable",
    "class_lookup",
    "guard_tensor_state",
    "has_real_value",
    "is_constant_value",
    "is_missing_attribute",
    "literal_repr",
    "merged_items",
    "real_value",
]
