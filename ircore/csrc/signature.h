// Shared by the two parts of ircore._signature_ext: the call signature and the fast call.
#pragma once

#include <Python.h>

namespace ircore {

// The signature of a call with these positional arguments under `spec` (bytes): new bytes, a new
// reference to None (take the careful path), or nullptr with an exception set (a misuse).
PyObject* call_signature(PyObject* spec, PyObject* const* args, Py_ssize_t nargs);

// Whether `generation` (what a plan or a remembered scope is stamped with) is the current one:
// ircore._state.State keeps each generation a one-element list, [True] until State.bump
// replaces it. Anything else (None: never resolved) is not current.
inline bool is_current_generation(PyObject* generation) {
  return PyList_CheckExact(generation) && PyList_GET_SIZE(generation) == 1 && PyList_GET_ITEM(generation, 0) == Py_True;
}

// Adds the FastCall type (fast_call.cpp) to the module; -1 with an exception set on failure.
int add_fast_call_type(PyObject* module);

// request_key(request) of ircore.priority (scope_block.cpp): a module-level METH_O function.
PyObject* request_key(PyObject* module, PyObject* request);

// Adds the BlockBase type (scope_block.cpp) to the module; -1 with an exception set on failure.
int add_block_base_type(PyObject* module);

}  // namespace ircore
