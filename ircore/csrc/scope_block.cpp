// ircore._signature_ext.BlockBase: entering and leaving a `with ircore.priority(...)` block seen before.
//
// Why: a per-request priority block is entered on every request. Its Python __enter__/__exit__
// (read the scope variable, look the enclosing scope up, check the generation, set the variable;
// on exit go back to the enclosing scope) cost ~300 ns of Python; here ~50 ns. The logic is the
// same as ircore.dispatch's pure-Python _BlockBase, which runs when this helper is not loaded.
//
// BlockBase(scope_var, seen): a base class. The subclass (ircore.dispatch.PriorityBlock) holds
//   `_seen`: {enclosing scope or None: (generation, scope)}, filled by its `_resolve(outer)`,
//   which __enter__ calls when the enclosing scope is not there or its generation is stale.
//   scope_var  ircore.dispatch.SCOPE (a ContextVar)
//   seen       that `_seen` dict. The generation that stamps what it remembers tells itself
//              whether it is current (ircore::is_current_generation): no state is read here.
// A scope has an `outer` attribute: the scope to go back to on exit.
#include "signature.h"

#include <Python.h>

#include <cstddef>

namespace {

struct BlockBase {
  PyObject_HEAD
  PyObject* scope_var;
  PyObject* seen;  // the subclass's `_seen` dict, set by __init__
  PyObject* dict;  // instance __dict__ of Python subclasses
};

PyObject* g_outer = nullptr;
PyObject* g_resolve = nullptr;

PyObject* block_enter(PyObject* obj, PyObject* /*unused*/) {
  auto* self = reinterpret_cast<BlockBase*>(obj);
  PyObject* outer = nullptr;
  if (PyContextVar_Get(self->scope_var, Py_None, &outer) < 0) return nullptr;
  PyObject* scope = nullptr;
  PyObject* hit = PyDict_GetItemWithError(self->seen, outer);  // borrowed: held while reading it
  if (hit != nullptr && PyTuple_CheckExact(hit) && PyTuple_GET_SIZE(hit) == 2) {
    if (ircore::is_current_generation(PyTuple_GET_ITEM(hit, 0))) scope = Py_NewRef(PyTuple_GET_ITEM(hit, 1));
  } else if (hit == nullptr && PyErr_Occurred()) {
    Py_DECREF(outer);
    return nullptr;
  }
  if (scope == nullptr) scope = PyObject_CallMethodOneArg(obj, g_resolve, outer);
  Py_DECREF(outer);
  if (scope == nullptr) return nullptr;
  PyObject* token = PyContextVar_Set(self->scope_var, scope);
  Py_DECREF(scope);
  if (token == nullptr) return nullptr;
  Py_DECREF(token);
  Py_RETURN_NONE;
}

PyObject* block_exit(PyObject* obj, PyObject* const* /*args*/, Py_ssize_t /*nargs*/) {
  auto* self = reinterpret_cast<BlockBase*>(obj);
  PyObject* scope = nullptr;
  if (PyContextVar_Get(self->scope_var, Py_None, &scope) < 0) return nullptr;
  PyObject* outer = scope == Py_None ? Py_NewRef(Py_None) : PyObject_GetAttr(scope, g_outer);
  Py_DECREF(scope);
  if (outer == nullptr) return nullptr;
  PyObject* token = PyContextVar_Set(self->scope_var, outer);
  Py_DECREF(outer);
  if (token == nullptr) return nullptr;
  Py_DECREF(token);
  Py_RETURN_NONE;  // never swallows the block's exception
}

int block_init(PyObject* obj, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<BlockBase*>(obj);
  PyObject *scope_var, *seen;
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "BlockBase() takes positional arguments only");
    return -1;
  }
  if (!PyArg_ParseTuple(args, "O!O!:BlockBase", &PyContextVar_Type, &scope_var, &PyDict_Type, &seen)) {
    return -1;
  }
  Py_INCREF(scope_var);
  Py_INCREF(seen);
  Py_XSETREF(self->scope_var, scope_var);
  Py_XSETREF(self->seen, seen);
  return 0;
}

int block_traverse(PyObject* obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<BlockBase*>(obj);
  Py_VISIT(self->scope_var);
  Py_VISIT(self->seen);
  Py_VISIT(self->dict);
  return 0;
}

int block_clear(PyObject* obj) {
  auto* self = reinterpret_cast<BlockBase*>(obj);
  Py_CLEAR(self->scope_var);
  Py_CLEAR(self->seen);
  Py_CLEAR(self->dict);
  return 0;
}

// Instances are of Python subclasses: subtype_dealloc re-tracks the object, calls this, then
// releases the (heap) type itself.
void block_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  block_clear(obj);
  Py_TYPE(obj)->tp_free(obj);
}

PyObject* block_new(PyTypeObject* type, PyObject* /*args*/, PyObject* /*kwargs*/) {
  return type->tp_alloc(type, 0);  // fields are set by __init__; a subclass that skips it fails on entry
}

PyObject* not_initialised(PyObject* obj, PyObject*) {
  PyErr_Format(PyExc_RuntimeError, "%s was not initialised (BlockBase.__init__ not called)", Py_TYPE(obj)->tp_name);
  return nullptr;
}

PyObject* block_enter_checked(PyObject* obj, PyObject* unused) {
  if (reinterpret_cast<BlockBase*>(obj)->seen == nullptr) return not_initialised(obj, unused);
  return block_enter(obj, unused);
}

PyObject* block_exit_checked(PyObject* obj, PyObject* const* args, Py_ssize_t nargs) {
  if (reinterpret_cast<BlockBase*>(obj)->scope_var == nullptr) return not_initialised(obj, nullptr);
  return block_exit(obj, args, nargs);
}

}  // namespace

// request_key(request: dict) -> tuple | None: (op, names, op, names, ...) with each list of names
// as a tuple, or None if that is not hashable (not a valid request: it is checked on entry).
PyObject* ircore::request_key(PyObject* /*module*/, PyObject* request) {
  if (!PyDict_Check(request)) {
    PyErr_SetString(PyExc_TypeError, "request_key(request: dict)");
    return nullptr;
  }
  PyObject* key = PyTuple_New(2 * PyDict_GET_SIZE(request));
  if (key == nullptr) return nullptr;
  Py_ssize_t pos = 0, i = 0;
  PyObject *name, *names;
  while (PyDict_Next(request, &pos, &name, &names)) {
    PyObject* value;
    if (names == Py_None || PyUnicode_Check(names) || PyTuple_Check(names)) {
      value = Py_NewRef(names);
    } else {
      value = PySequence_Tuple(names);
      if (value == nullptr) {
        Py_DECREF(key);
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
        PyErr_Clear();
        Py_RETURN_NONE;
      }
    }
    PyTuple_SET_ITEM(key, i++, Py_NewRef(name));
    PyTuple_SET_ITEM(key, i++, value);
  }
  if (PyObject_Hash(key) == -1) {
    Py_DECREF(key);
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return key;
}

namespace {

PyMethodDef kBlockMethods[] = {
    {"__enter__", block_enter_checked, METH_NOARGS, "Enter the block: its scope becomes the current one."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(block_exit_checked)), METH_FASTCALL,
     "Leave the block: the enclosing scope becomes the current one again."},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject BlockBaseType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "ircore._signature_ext.BlockBase";
  t.tp_basicsize = sizeof(BlockBase);
  t.tp_dictoffset = offsetof(BlockBase, dict);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC;
  t.tp_doc = "__enter__/__exit__ of ircore.priority blocks (see scope_block.cpp).";
  t.tp_new = block_new;
  t.tp_init = block_init;
  t.tp_dealloc = block_dealloc;
  t.tp_traverse = block_traverse;
  t.tp_clear = block_clear;
  t.tp_methods = kBlockMethods;
  return t;
}();

}  // namespace

int ircore::add_block_base_type(PyObject* module) {
  g_outer = PyUnicode_InternFromString("outer");
  g_resolve = PyUnicode_InternFromString("_resolve");
  if (g_outer == nullptr || g_resolve == nullptr) return -1;
  if (PyType_Ready(&BlockBaseType) < 0) return -1;
  Py_INCREF(&BlockBaseType);
  if (PyModule_AddObject(module, "BlockBase", reinterpret_cast<PyObject*>(&BlockBaseType)) < 0) {
    Py_DECREF(&BlockBaseType);
    return -1;
  }
  return 0;
}
