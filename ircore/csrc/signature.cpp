// ircore._signature_ext: the call signature of an eager op call, computed without Python attribute reads.
//
// Why: reading a tensor's dtype, device or shape from Python costs 40-110 ns each, and the eager
// path needs about ten of them per call to validate arguments and answer supports_args. Here the
// same facts cost a few nanoseconds; ircore caches decisions per signature (see ircore._fastpath).
//
// signature(spec, *args) -> bytes | None. `spec` has one character per argument:
//   'T' tensor, 't' tensor or None, 'i' int, 'j' int or None, 'b' bool, 'f' real number, 'g' real
//   number or None. For each tensor: dtype, device type and index, number of dimensions, flags
//   (contiguous; last-dimension stride 1; same shape as the first tensor; requires grad while
//   grad mode is on) and the size of the last dimension. For a real number only whether it is
//   >= 0 (an op's check may refuse a negative or NaN epsilon), not its value. None (the caller
//   takes the careful path) when a tensor is a subclass other than Parameter or is not a plain
//   strided tensor (sparse, nested), an argument has an unexpected type (a real number is a
//   float or an int, not a bool), an int (also one given as a real number) does not fit in 64
//   bits, or a torch dispatch mode is active: the careful path refuses these, so a remembered
//   choice never serves one.
#include "signature.h"

#include <Python.h>

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>

namespace {

constexpr Py_ssize_t kMaxArgs = 16;
constexpr Py_ssize_t kBytesPerTensor = 13;

PyObject* signature_of(PyObject* spec_bytes, PyObject* const* args, Py_ssize_t n);

PyObject* signature(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || !PyBytes_CheckExact(args[0])) {
    PyErr_SetString(PyExc_TypeError, "signature(spec: bytes, *args)");
    return nullptr;
  }
  return ircore::call_signature(args[0], args + 1, nargs - 1);
}

PyObject* signature_of(PyObject* spec_bytes, PyObject* const* args, Py_ssize_t nargs) {
  const char* spec = PyBytes_AS_STRING(spec_bytes);
  const Py_ssize_t n = PyBytes_GET_SIZE(spec_bytes);
  if (n != nargs || n > kMaxArgs) {
    PyErr_SetString(PyExc_TypeError, "signature(): spec and arguments differ in length");
    return nullptr;
  }
  if (c10::impl::TorchDispatchModeTLS::stack_len() != 0) Py_RETURN_NONE;
  unsigned char buf[kMaxArgs * kBytesPerTensor];
  Py_ssize_t pos = 0;
  const at::Tensor* first = nullptr;
  const bool grad_mode = at::GradMode::is_enabled();
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = args[i];
    const char kind = spec[i];
    if (a == Py_None && (kind == 't' || kind == 'j' || kind == 'g')) {
      buf[pos++] = 0xff;
      continue;
    }
    if (kind == 'f' || kind == 'g') {
      bool non_negative;
      if (PyFloat_Check(a)) {
        non_negative = PyFloat_AS_DOUBLE(a) >= 0.0;  // false for NaN
      } else if (PyLong_CheckExact(a)) {
        // An int beyond 64 bits is refused by the careful path (ircore._argtypes): never cached.
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
          PyErr_Clear();
          Py_RETURN_NONE;
        }
        non_negative = v >= 0;
      } else {
        Py_RETURN_NONE;
      }
      buf[pos++] = non_negative ? 0x10 : 0x11;
      continue;
    }
    if (kind == 'T' || kind == 't') {
      if (!THPVariable_CheckExact(a)) Py_RETURN_NONE;
      const at::Tensor& t = THPVariable_Unpack(a);
      // Sparse, nested and other non-strided tensors: their sizes/strides are not plain arrays.
      if (t.layout() != c10::kStrided || t.is_nested()) Py_RETURN_NONE;
      const int64_t dim = t.dim();
      if (dim > 64) Py_RETURN_NONE;
      const int64_t last = dim ? t.size(-1) : 0;
      unsigned char flags = 0;
      if (t.is_contiguous()) flags |= 1;
      if (dim && t.stride(-1) == 1) flags |= 2;
      if (grad_mode && t.requires_grad()) flags |= 8;
      if (first == nullptr) {
        first = &t;
      } else if (t.sizes().equals(first->sizes())) {
        flags |= 4;
      }
      const c10::Device dev = t.device();
      buf[pos++] = static_cast<unsigned char>(t.scalar_type());
      buf[pos++] = static_cast<unsigned char>(dev.type());
      buf[pos++] = static_cast<unsigned char>(dev.index());
      buf[pos++] = static_cast<unsigned char>(dim);
      buf[pos++] = flags;
      std::memcpy(buf + pos, &last, sizeof(last));
      pos += sizeof(last);
    } else if (kind == 'i' || kind == 'j') {
      if (!PyLong_CheckExact(a)) Py_RETURN_NONE;
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
      if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        Py_RETURN_NONE;
      }
      buf[pos++] = 0x01;
      std::memcpy(buf + pos, &v, sizeof(v));
      pos += sizeof(v);
    } else if (kind == 'b') {
      if (a != Py_True && a != Py_False) Py_RETURN_NONE;
      buf[pos++] = a == Py_True ? 0x03 : 0x02;
    } else {
      PyErr_Format(PyExc_ValueError, "signature(): unknown argument kind %c in spec", kind);
      return nullptr;
    }
  }
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(buf), pos);
}

}  // namespace

// A C++ exception must not cross into Python (it would terminate the process): any tensor this
// code cannot describe sends the call to the careful path instead.
PyObject* ircore::call_signature(PyObject* spec, PyObject* const* args, Py_ssize_t nargs) {
  try {
    return signature_of(spec, args, nargs);
  } catch (...) {
    Py_RETURN_NONE;
  }
}

namespace {

PyMethodDef kMethods[] = {
    {"signature", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(signature)), METH_FASTCALL,
     "signature(spec, *args) -> bytes | None: the call signature ircore caches dispatch decisions by."},
    {"request_key", ircore::request_key, METH_O,
     "request_key(request) -> tuple | None: the hashable form of an ircore.priority request."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_signature_ext", "Call signatures for ircore's eager path.", -1,
                       kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__signature_ext(void) {
  PyObject* module = PyModule_Create(&kModule);
  if (module != nullptr && (ircore::add_fast_call_type(module) < 0 || ircore::add_block_base_type(module) < 0)) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
