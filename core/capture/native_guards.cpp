// The tensor checks of a guard function, in C++ (loaded by native.py).
//
// A guard function checks each tensor it reads for its dtype, device, requires_grad, sizes
// and strides: five attribute reads in Python, each building a Python object, about 1 us a
// tensor. `tensor_check(specs)` returns a builtin that does those checks for many tensors
// in one call, reading each TensorImpl directly: a model's parameters cost nanoseconds.
// It answers exactly what the Python checks answer (guards.GuardSet.tensor), and False
// where they would raise (a sparse tensor's strides, symbolic sizes).
#include <Python.h>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace {

struct Spec {
  at::ScalarType dtype;
  c10::Device device;
  bool requires_grad;
  std::vector<int64_t> sizes;
  bool check_strides;
  std::vector<int64_t> strides;
};

const char* kCapsule = "torchkiln.tensor_check";

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

bool matches(PyObject* obj, const Spec& s) {
  if (!THPVariable_Check(obj)) {
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.layout() != c10::kStrided ||
      t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return false;
  }
  return t.scalar_type() == s.dtype && t.device() == s.device &&
      t.requires_grad() == s.requires_grad && t.sizes() == c10::IntArrayRef(s.sizes) &&
      (!s.check_strides || t.strides() == c10::IntArrayRef(s.strides));
}

// The builtin `tensor_check` returns: its arguments, in order, against its specs.
PyObject* check(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs) {
  auto* specs = static_cast<std::vector<Spec>*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (specs == nullptr) {
    return nullptr;
  }
  if (static_cast<size_t>(nargs) != specs->size()) {
    PyErr_Format(PyExc_TypeError, "tensor_check takes %zu tensors, got %zd", specs->size(), nargs);
    return nullptr;
  }
  try {
    for (Py_ssize_t i = 0; i < nargs; i++) {
      if (!matches(args[i], (*specs)[i])) {
        Py_RETURN_FALSE;
      }
    }
  } catch (const std::exception&) {
    Py_RETURN_FALSE;  // where the Python checks would raise: the guard fails
  }
  Py_RETURN_TRUE;
}

PyMethodDef check_def = {
    "tensor_check", (PyCFunction)(void (*)(void))check, METH_FASTCALL,
    "Whether each argument is a strided tensor with the metadata of its spec."};

void free_specs(PyObject* capsule) {
  delete static_cast<std::vector<Spec>*>(PyCapsule_GetPointer(capsule, kCapsule));
}

// tensor_check([(dtype, device, requires_grad, sizes, strides or None), ...]) -> builtin
PyObject* tensor_check(PyObject*, PyObject* arg) {
  if (!PyList_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "tensor_check takes a list of specs");
    return nullptr;
  }
  auto specs = std::make_unique<std::vector<Spec>>();
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(arg); i++) {
    PyObject* item = PyList_GET_ITEM(arg, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5 ||
        !THPDtype_Check(PyTuple_GET_ITEM(item, 0)) ||
        !THPDevice_Check(PyTuple_GET_ITEM(item, 1)) || !PyBool_Check(PyTuple_GET_ITEM(item, 2))) {
      PyErr_Format(PyExc_TypeError,
                   "spec %zd is not (dtype, device, requires_grad, sizes, strides)", i);
      return nullptr;
    }
    Spec s{reinterpret_cast<THPDtype*>(PyTuple_GET_ITEM(item, 0))->scalar_type,
           reinterpret_cast<THPDevice*>(PyTuple_GET_ITEM(item, 1))->device,
           PyTuple_GET_ITEM(item, 2) == Py_True,
           {},
           PyTuple_GET_ITEM(item, 4) != Py_None,
           {}};
    if (!int_tuple(PyTuple_GET_ITEM(item, 3), s.sizes) ||
        (s.check_strides && !int_tuple(PyTuple_GET_ITEM(item, 4), s.strides))) {
      if (!PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "spec %zd: sizes and strides must be tuples of ints", i);
      }
      return nullptr;
    }
    specs->push_back(std::move(s));
  }
  PyObject* capsule = PyCapsule_New(specs.get(), kCapsule, free_specs);
  if (capsule == nullptr) {
    return nullptr;
  }
  specs.release();
  PyObject* fn = PyCFunction_New(&check_def, capsule);
  Py_DECREF(capsule);
  return fn;
}

PyMethodDef methods[] = {
    {"tensor_check", tensor_check, METH_O,
     "A builtin checking tensors against [(dtype, device, requires_grad, sizes, strides)]."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_kiln_guards", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__kiln_guards() { return PyModule_Create(&module_def); }
