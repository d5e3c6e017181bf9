// A guard function's checks, in C++ (loaded by native.py; built from guard_program.py).
//
// A model's guard function checks hundreds of things on every call: the type or identity
// of each module, config value and global the trace read, constants, and each tensor's
// dtype, device, requires_grad, sizes and strides. In Python each check is a few bytecodes
// and each tensor attribute builds a Python object: 50-70 ns a check, tens of microseconds
// a call. `guard_program(nargs, nodes, checks)` returns a builtin that makes those checks
// in one call:
//
// - nodes are the sources the checks read, each one step from its parent (a guard
//   argument, a constant, `.attr`, `[key]`, a call without arguments, `type()`), read once
//   a call, when a check first needs it;
// - checks run in order and stop at the first that fails.
//
// It answers exactly what the Python expressions answer, and False where one of them
// would raise an Exception (a missing attribute or key, a sparse tensor's strides), as
// the dispatcher treats a raising guard.
#include <Python.h>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

// How a node is read (guard_program.py: STEP_*): an argument, a constant, its parent's
// `.attr`, `[key]`, `()` (no arguments) or `type(parent)`.
enum Step : long { kArg = 0, kConst = 1, kAttr = 2, kItem = 3, kCall = 4, kType = 5 };

// What a check tests (guard_program.py: OP_*).
enum Op : long {
  kTypeIs = 0,    // type(v) is operand
  kIs = 1,        // v is operand
  kIdEq = 2,      // id(v) == operand (an object held weakly)
  kEq = 3,        // v == operand
  kNotIn = 4,     // operand not in v
  kLenEq = 5,     // len(v) == operand
  kFalsy = 6,     // not v
  kListEq = 7,    // list(v) == operand
  kTensor = 8,    // a strided tensor with the metadata of the spec operand
  kTruthy = 9,    // bool(v)
  kIsNode = 10,   // v is the value of node `number`
  kSign = 11,     // math.copysign(1.0, v) == operand (a float)
  kDataPtr = 12,  // v is a tensor whose data starts at the operand (an address)
};

struct Spec {
  at::ScalarType dtype = at::kFloat;
  c10::Device device{c10::kCPU};
  bool requires_grad = false;
  std::vector<int64_t> sizes;
  bool check_strides = false;
  std::vector<int64_t> strides;
};

struct Node {
  int parent;
  long step;
  PyObject* operand;  // owned: the constant, attribute name or key
  Py_ssize_t index;   // an argument's position, or an int key
  bool int_key;
};

struct Check {
  int node;
  long op;
  PyObject* operand;  // owned, or null
  Py_ssize_t number;  // kLenEq's length, kIsNode's node
  double sign;        // kSign's
  void* address;      // kIdEq's id, kDataPtr's address
  Spec spec;          // kTensor's
};

struct Program {
  Py_ssize_t nargs = 0;
  std::vector<Node> nodes;
  std::vector<Check> checks;
  ~Program() {
    for (auto& n : nodes) Py_XDECREF(n.operand);
    for (auto& c : checks) Py_XDECREF(c.operand);
  }
};

bool int_tuple(PyObject* obj, std::vector<int64_t>& out) {
  if (!PyTuple_Check(obj)) {
    return false;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); i++) {
    int64_t v = PyLong_AsLongLong(PyTuple_GET_ITEM(obj, i));
    if (v == -1 && PyErr_Occurred()) {
      return false;
    }
    out.push_back(v);
  }
  return true;
}

// spec: (dtype, device, requires_grad, sizes, strides or None)
bool parse_spec(PyObject* item, Spec& s) {
  if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5 ||
      !THPDtype_Check(PyTuple_GET_ITEM(item, 0)) || !THPDevice_Check(PyTuple_GET_ITEM(item, 1)) ||
      !PyBool_Check(PyTuple_GET_ITEM(item, 2))) {
    PyErr_SetString(PyExc_TypeError,
                    "a tensor spec is (dtype, device, requires_grad, sizes, strides or None)");
    return false;
  }
  s.dtype = reinterpret_cast<THPDtype*>(PyTuple_GET_ITEM(item, 0))->scalar_type;
  s.device = reinterpret_cast<THPDevice*>(PyTuple_GET_ITEM(item, 1))->device;
  s.requires_grad = PyTuple_GET_ITEM(item, 2) == Py_True;
  s.check_strides = PyTuple_GET_ITEM(item, 4) != Py_None;
  if (!int_tuple(PyTuple_GET_ITEM(item, 3), s.sizes) ||
      (s.check_strides && !int_tuple(PyTuple_GET_ITEM(item, 4), s.strides))) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_TypeError, "a tensor spec's sizes and strides are tuples of ints");
    }
    return false;
  }
  return true;
}

bool tensor_matches(PyObject* obj, const Spec& s) {
  if (!THPVariable_Check(obj)) {
    return false;
  }
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined() || t.layout() != c10::kStrided ||
        t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
      return false;
    }
    return t.scalar_type() == s.dtype && t.device() == s.device &&
        t.requires_grad() == s.requires_grad && t.sizes() == c10::IntArrayRef(s.sizes) &&
        (!s.check_strides || t.strides() == c10::IntArrayRef(s.strides));
  } catch (const std::exception&) {
    return false;  // where the Python checks would raise: the guard fails
  }
}

// Whether obj is a tensor whose data starts at address (False where data_ptr() would raise:
// no storage, or one whose data access raises, as torch's CUDA graphs poison a storage).
bool data_at(PyObject* obj, void* address) {
  if (!THPVariable_Check(obj)) {
    return false;
  }
  try {
    return THPVariable_Unpack(obj).const_data_ptr() == address;
  } catch (const std::exception&) {
    return false;
  }
}

// The value of node i (a new reference), read on first use; null where the read raised.
PyObject* resolve(const Program& p, std::vector<PyObject*>& values, PyObject* const* args,
                  int i) {
  if (values[i] != nullptr) {
    return values[i];
  }
  const Node& n = p.nodes[i];
  PyObject* value = nullptr;
  if (n.step == kArg) {
    value = Py_NewRef(args[n.index]);
  } else if (n.step == kConst) {
    value = Py_NewRef(n.operand);
  } else {
    PyObject* parent = resolve(p, values, args, n.parent);
    if (parent == nullptr) {
      return nullptr;
    }
    if (n.step == kAttr) {
      value = PyObject_GetAttr(parent, n.operand);
    } else if (n.step == kCall) {
      value = PyObject_CallNoArgs(parent);
    } else if (n.step == kType) {
      value = Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(parent)));
    } else if (PyDict_CheckExact(parent)) {
      value = Py_XNewRef(PyDict_GetItemWithError(parent, n.operand));
    } else if (n.int_key && (PyList_CheckExact(parent) || PyTuple_CheckExact(parent))) {
      value = PySequence_GetItem(parent, n.index);
    } else {
      value = PyObject_GetItem(parent, n.operand);
    }
  }
  values[i] = value;
  return value;
}

// 1: the check holds, 0: it does not, -1: it raised.
int holds(const Program& p, std::vector<PyObject*>& values, PyObject* const* args, const Check& c,
          PyObject* v) {
  switch (c.op) {
    case kTypeIs:
      return reinterpret_cast<PyObject*>(Py_TYPE(v)) == c.operand;
    case kIs:
      return v == c.operand;
    case kIdEq:
      return static_cast<void*>(v) == c.address;
    case kEq: {
      PyObject* r = PyObject_RichCompare(v, c.operand, Py_EQ);
      if (r == nullptr) {
        return -1;
      }
      int truth = PyObject_IsTrue(r);
      Py_DECREF(r);
      return truth;
    }
    case kNotIn: {
      int in = PySequence_Contains(v, c.operand);
      return in < 0 ? -1 : !in;
    }
    case kLenEq: {
      Py_ssize_t n = PyObject_Length(v);
      return n < 0 ? -1 : n == c.number;
    }
    case kFalsy: {
      int truth = PyObject_IsTrue(v);
      return truth < 0 ? -1 : !truth;
    }
    case kListEq: {
      PyObject* items = PySequence_List(v);
      if (items == nullptr) {
        return -1;
      }
      int eq = PyObject_RichCompareBool(items, c.operand, Py_EQ);
      Py_DECREF(items);
      return eq;
    }
    case kTensor:
      return tensor_matches(v, c.spec);
    case kTruthy:
      return PyObject_IsTrue(v);
    case kIsNode: {
      PyObject* other = resolve(p, values, args, static_cast<int>(c.number));
      return other == nullptr ? -1 : v == other;
    }
    case kSign: {
      double d = PyFloat_AsDouble(v);
      if (d == -1.0 && PyErr_Occurred()) {
        return -1;
      }
      return std::copysign(1.0, d) == c.sign;
    }
    case kDataPtr:
      return data_at(v, c.address);
  }
  return 0;
}

// A guard program as a Python object: callable, and seen by the cycle collector through the
// objects it holds (a guarded class or function may lead back to the guard's namespace,
// which holds the program).
struct ProgramObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  Program* program;
};

PyTypeObject ProgramType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Calling a program: whether every check holds for these arguments.
PyObject* run(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const Program* p = reinterpret_cast<ProgramObject*>(self)->program;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (p == nullptr || kwnames != nullptr || nargs != p->nargs) {
    PyErr_Format(PyExc_TypeError, "this guard program takes %zd positional arguments, got %zd",
                 p == nullptr ? 0 : p->nargs, nargs);
    return nullptr;
  }
  std::vector<PyObject*> values(p->nodes.size(), nullptr);
  int ok = 1;
  for (const Check& c : p->checks) {
    PyObject* v = resolve(*p, values, args, c.node);
    ok = v == nullptr ? -1 : holds(*p, values, args, c, v);
    if (ok != 1) {
      break;
    }
  }
  for (PyObject* v : values) {
    Py_XDECREF(v);
  }
  if (ok < 0 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
      return nullptr;  // KeyboardInterrupt and the like pass through, as from Python
    }
    PyErr_Clear();
  }
  return Py_NewRef(ok == 1 ? Py_True : Py_False);
}

int traverse(PyObject* self, visitproc visit, void* arg) {
  const Program* p = reinterpret_cast<ProgramObject*>(self)->program;
  if (p != nullptr) {
    for (const Node& n : p->nodes) Py_VISIT(n.operand);
    for (const Check& c : p->checks) Py_VISIT(c.operand);
  }
  return 0;
}

int clear(PyObject* self) {
  auto* obj = reinterpret_cast<ProgramObject*>(self);
  delete obj->program;  // drops what it holds
  obj->program = nullptr;
  return 0;
}

void dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  clear(self);
  Py_TYPE(self)->tp_free(self);
}

bool parse_node(PyObject* item, Py_ssize_t nargs, size_t count, Node& n) {
  long parent = 0;
  if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
    PyErr_SetString(PyExc_TypeError, "a node is (parent, step, operand)");
    return false;
  }
  parent = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
  n.step = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
  if (PyErr_Occurred()) {
    return false;
  }
  PyObject* operand = PyTuple_GET_ITEM(item, 2);
  n.parent = static_cast<int>(parent);
  n.operand = Py_NewRef(operand);
  if (PyUnicode_CheckExact(n.operand)) {
    // interned: attribute lookups then hit the type's method cache, and dict lookups
    // compare the key by identity first
    PyUnicode_InternInPlace(&n.operand);
  }
  n.index = 0;
  n.int_key = PyLong_CheckExact(operand);
  if (n.int_key) {
    n.index = PyLong_AsSsize_t(operand);
    if (PyErr_Occurred()) {
      return false;
    }
  }
  bool has_parent = n.step >= kAttr;
  if ((n.step < kArg || n.step > kType) || (has_parent && (parent < 0 || parent >= (long)count)) ||
      (n.step == kArg && (!n.int_key || n.index < 0 || n.index >= nargs)) ||
      (n.step == kAttr && !PyUnicode_CheckExact(operand))) {
    PyErr_SetString(PyExc_ValueError, "a node reads an argument, a constant, or an earlier node");
    return false;
  }
  return true;
}

bool parse_check(PyObject* item, size_t nodes, Check& c) {
  if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
    PyErr_SetString(PyExc_TypeError, "a check is (node, op, operand)");
    return false;
  }
  long node = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
  c.op = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
  if (PyErr_Occurred()) {
    return false;
  }
  if (node < 0 || node >= (long)nodes || c.op < kTypeIs || c.op > kDataPtr) {
    PyErr_SetString(PyExc_ValueError, "a check tests a node with a known op");
    return false;
  }
  PyObject* operand = PyTuple_GET_ITEM(item, 2);
  c.node = static_cast<int>(node);
  c.operand = nullptr;
  c.number = 0;
  c.sign = 0.0;
  c.address = nullptr;
  if (c.op == kTensor) {
    return parse_spec(operand, c.spec);
  }
  if (c.op == kIdEq || c.op == kDataPtr) {
    c.address = PyLong_AsVoidPtr(operand);
    return !PyErr_Occurred();
  }
  if (c.op == kLenEq || c.op == kIsNode) {
    c.number = PyLong_AsSsize_t(operand);
    if (c.op == kIsNode && !PyErr_Occurred() && (c.number < 0 || c.number >= (Py_ssize_t)nodes)) {
      PyErr_SetString(PyExc_ValueError, "an identity check compares two nodes");
    }
    return !PyErr_Occurred();
  }
  if (c.op == kSign) {
    c.sign = PyFloat_AsDouble(operand);
    return !PyErr_Occurred();
  }
  c.operand = Py_NewRef(operand);
  return true;
}

// guard_program(nargs, [(parent, step, operand), ...], [(node, op, operand), ...]) -> program
PyObject* guard_program(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyLong_Check(args[0]) || !PyList_Check(args[1]) || !PyList_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "guard_program takes (nargs, nodes list, checks list)");
    return nullptr;
  }
  auto program = std::make_unique<Program>();
  program->nargs = PyLong_AsSsize_t(args[0]);
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(args[1]); i++) {
    program->nodes.push_back({-1, kConst, nullptr, 0, false});
    if (!parse_node(PyList_GET_ITEM(args[1], i), program->nargs, program->nodes.size() - 1,
                    program->nodes.back())) {
      return nullptr;
    }
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(args[2]); i++) {
    program->checks.push_back({});
    if (!parse_check(PyList_GET_ITEM(args[2], i), program->nodes.size(),
                     program->checks.back())) {
      return nullptr;
    }
  }
  auto* obj = PyObject_GC_New(ProgramObject, &ProgramType);
  if (obj == nullptr) {
    return nullptr;
  }
  obj->vectorcall = run;
  obj->program = program.release();
  PyObject_GC_Track(obj);
  return reinterpret_cast<PyObject*>(obj);
}

PyMethodDef methods[] = {
    {"guard_program", (PyCFunction)(void (*)(void))guard_program, METH_FASTCALL,
     "A builtin making a guard function's checks over nodes read from its arguments."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_kiln_guards", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kiln_guards() {
  ProgramType.tp_name = "_kiln_guards.GuardProgram";
  ProgramType.tp_doc = "Whether every check of a guard program holds for the arguments.";
  ProgramType.tp_basicsize = sizeof(ProgramObject);
  ProgramType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  ProgramType.tp_vectorcall_offset = offsetof(ProgramObject, vectorcall);
  ProgramType.tp_call = PyVectorcall_Call;
  ProgramType.tp_traverse = traverse;
  ProgramType.tp_clear = clear;
  ProgramType.tp_dealloc = dealloc;
  if (PyType_Ready(&ProgramType) < 0) {
    return nullptr;
  }
  return PyModule_Create(&module_def);
}
