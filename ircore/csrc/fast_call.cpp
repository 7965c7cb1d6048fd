// ircore._signature_ext.FastCall: an op's eager call when its signature's choice is remembered,
// and the first call with a signature that has none.
//
// Why: with the choice cached, what is left of an eager call is bookkeeping: compute the
// signature, read the priority scope, look the signature up, check that DEBUG logging is off,
// call the implementation. From Python each of those is a call of its own (30-60 ns each); here
// they are one. On a miss (a signature with no remembered choice, in a table that is current)
// the fast call has already done the signature and the lookups, so it hands the call to
// `choose_and_cache(op, key, args, plan)` itself, with the plan that decides it: repeating
// those steps in Python cost a first call inside a never-seen priority block more than a miss
// outside one (benchmarks/dispatch_overhead.py). The generated __call__
// (ircore/_fastpath.py) calls a FastCall first and takes its Python path when the answer is the
// `miss` sentinel: a call that needs the careful path (signature None), a scope whose plan is
// stale, DEBUG logging on for a remembered call, keywords, or a miss when `choose` is None.
//
// FastCall(spec, cache, scope_var, name, log_cache, note_failure, miss, op, choose)
//   spec          the op's signature spec (bytes)
//   cache         op.signature_cache: {signature: entry} of the process-wide plan (its signatures)
//   scope_var     ircore._state.SCOPE: a ContextVar holding None or a scope whose `plans` is a
//                 dict: op name -> plan, with an entry for exactly the ops the scope names (a name
//                 it lacks: not named there, the process-wide table decides). One lookup tells
//                 both whether the scope names the op and its plan. `plans` is read from the
//                 scope's __slots__ slot at the offset its member descriptor gives (getattr when
//                 the scope's type has no such slot).
//   name          the op's name (str)
//   log_cache     the "ircore" logger's isEnabledFor cache (a dict: level -> bool), or None
//   note_failure  note_failure(op_name, provider, exc), called when a remembered implementation
//                 raises (choose_and_cache notes its own failures: nothing is added to those)
//   miss          the sentinel returned when the Python path must decide
//   op            the IrOp (its `_plan` is the process-wide plan), passed to `choose`
//   choose        ircore.dispatch.choose_and_cache, called on a miss as
//                 choose(op, signature, args tuple, plan): the scope's plan when a scope names
//                 the op, else op._plan when it is current, else None (choose looks it up); None
//                 here: misses return `miss` (the Python path decides; tests use this)
// An entry is ircore.dispatch.Entry (provider, call, ...) and a plan ircore.dispatch.Plan
// (generation, entries, {signature: entry}): named tuples, read here by position (PyTuple_Check
// admits the subclass); choose_and_cache fills them, this only reads. A plan's stamp (its
// generation, a one-element list that State.bump turns from [True] to [False]) tells whether the
// plan is current (ircore::is_current_generation, signature.h): the state itself is never read.
#include "signature.h"

#include <Python.h>
#include <structmember.h>

namespace {

struct FastCall {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* spec;
  PyObject* cache;
  PyObject* scope_var;
  PyObject* name;
  PyObject* log_cache;
  PyObject* note_failure;
  PyObject* miss;
  PyObject* op;
  PyObject* choose;
  PyTypeObject* scope_type;  // the type of the last scope read, and its `plans` slot's offset (-1: none)
  Py_ssize_t plans_offset;
};

PyObject* g_plans = nullptr;  // interned attribute names
PyObject* g_debug = nullptr;  // logging.DEBUG, the isEnabledFor cache's key
PyObject* g_plan = nullptr;   // "_plan"

PyObject* miss(FastCall* self) {
  Py_INCREF(self->miss);
  return self->miss;
}

// `scope.plans` (new reference), nullptr with an exception if it has none. A scope is a
// `__slots__` object: its slot is read at the member descriptor's offset, as `member_get` would,
// once the scope's type has been seen (learned again whenever the type differs); any other
// attribute goes through getattr.
PyObject* scope_plans(FastCall* self, PyObject* scope) {
  PyTypeObject* type = Py_TYPE(scope);
  if (type != self->scope_type) {
    Py_ssize_t offset = -1;
    PyObject* descr = PyObject_GetAttr(reinterpret_cast<PyObject*>(type), g_plans);
    if (descr == nullptr) {
      PyErr_Clear();
    } else if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
      auto* member = reinterpret_cast<PyMemberDescrObject*>(descr);
      const PyMemberDef* def = member->d_member;
      if (def->type == T_OBJECT_EX && !(def->flags & PY_AUDIT_READ) && PyType_IsSubtype(type, member->d_common.d_type)) {
        offset = def->offset;
      }
    }
    Py_XDECREF(descr);
    Py_INCREF(type);
    Py_XSETREF(self->scope_type, type);
    self->plans_offset = offset;
  }
  if (self->plans_offset >= 0) {
    PyObject* plans = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(scope) + self->plans_offset);
    if (plans != nullptr) return Py_NewRef(plans);
  }
  return PyObject_GetAttr(scope, g_plans);  // also raises AttributeError for an empty slot
}

// The {signature: entry} table that decides this call: the process-wide one, or the current
// scope's plan's if the scope names this op (then *plan_out is a new reference to that plan, else
// nullptr). New reference; nullptr without an exception means "let Python decide" (a stale
// scoped plan), with one an error.
PyObject* decision_table(FastCall* self, PyObject** plan_out) {
  *plan_out = nullptr;
  PyObject* scope = nullptr;
  if (PyContextVar_Get(self->scope_var, Py_None, &scope) < 0) return nullptr;
  if (scope == Py_None) {
    Py_DECREF(scope);
    Py_INCREF(self->cache);
    return self->cache;
  }
  PyObject* plans = scope_plans(self, scope);
  Py_DECREF(scope);
  if (plans == nullptr) return nullptr;
  PyObject* table = nullptr;
  if (PyDict_CheckExact(plans)) {
    PyObject* plan = PyDict_GetItemWithError(plans, self->name);  // borrowed
    if (plan == nullptr) {
      if (!PyErr_Occurred()) table = Py_NewRef(self->cache);  // not named here: the process-wide table
    } else {
      if (PyTuple_Check(plan) && PyTuple_GET_SIZE(plan) == 3 &&
          ircore::is_current_generation(PyTuple_GET_ITEM(plan, 0)) && PyDict_CheckExact(PyTuple_GET_ITEM(plan, 2))) {
        table = Py_NewRef(PyTuple_GET_ITEM(plan, 2));
        *plan_out = Py_NewRef(plan);
      }
    }
  }
  Py_DECREF(plans);
  return table;
}

bool debug_logging_may_be_on(FastCall* self) {
  if (self->log_cache == Py_None) return true;
  PyObject* cached = PyDict_GetItemWithError(self->log_cache, g_debug);  // borrowed
  if (cached == nullptr) PyErr_Clear();
  return cached != Py_False;  // not yet cached, or True: the Python path asks isEnabledFor
}

// Tell note_failure which provider raised (it adds a note to the exception) and keep the
// exception, unless note_failure returns another to raise instead (for a SystemExit or a
// GeneratorExit from a kernel: ircore.dispatch.note_failure), the original as its cause.
void note_failure(FastCall* self, PyObject* provider) {
  if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != nullptr) PyException_SetTraceback(value, traceback);
  PyObject* done = PyObject_CallFunctionObjArgs(self->note_failure, self->name, provider, value, nullptr);
  if (done == nullptr) PyErr_Clear();  // a failing note must not replace the real error
  if (done != nullptr && PyExceptionInstance_Check(done)) {
    PyException_SetCause(done, value);  // steals the reference to value
    Py_INCREF(value);
    PyException_SetContext(done, value);  // steals it too
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(done)), done);
    Py_DECREF(done);
    Py_DECREF(type);
    Py_XDECREF(traceback);
    return;
  }
  Py_XDECREF(done);
  PyErr_Restore(type, value, traceback);
}

// op._plan if it is current and its table is `cache` (so choose_and_cache remembers the choice
// where the fast call looks), else None: choose_and_cache then looks the plan up. New reference.
PyObject* process_plan(FastCall* self) {
  PyObject* plan = PyObject_GetAttr(self->op, g_plan);
  if (plan == nullptr) PyErr_Clear();  // None: looked up in Python
  const bool current = plan != nullptr && PyTuple_Check(plan) && PyTuple_GET_SIZE(plan) == 3 &&
                       ircore::is_current_generation(PyTuple_GET_ITEM(plan, 0)) && PyTuple_GET_ITEM(plan, 2) == self->cache;
  if (current) return plan;
  Py_XDECREF(plan);
  Py_RETURN_NONE;
}

// A miss in a current table: choose_and_cache(op, key, args, plan) validates, chooses, remembers
// and runs. Steals `plan` (a new reference, or nullptr outside scopes). Its exceptions pass
// through as they are (it notes a provider's failure itself).
PyObject* choose(FastCall* self, PyObject* key, PyObject* const* args, Py_ssize_t nargs, PyObject* plan) {
  if (plan == nullptr) plan = process_plan(self);
  PyObject* arg_tuple = PyTuple_New(nargs);
  if (arg_tuple == nullptr) {
    Py_DECREF(plan);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(arg_tuple, i, args[i]);
  }
  PyObject* call_args[] = {self->op, key, arg_tuple, plan};
  PyObject* result = PyObject_Vectorcall(self->choose, call_args, 4, nullptr);
  Py_DECREF(arg_tuple);
  Py_DECREF(plan);
  return result;
}

PyObject* fast_call(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<FastCall*>(callable);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) return miss(self);
  PyObject* key = ircore::call_signature(self->spec, args, nargs);
  if (key == nullptr) return nullptr;
  if (key == Py_None) {
    Py_DECREF(key);
    return miss(self);
  }
  PyObject* plan = nullptr;  // the scope's plan, when a scope names the op
  PyObject* table = decision_table(self, &plan);
  if (table == nullptr) {
    Py_DECREF(key);
    return PyErr_Occurred() ? nullptr : miss(self);
  }
  PyObject* entry = PyDict_GetItemWithError(table, key);  // borrowed
  Py_XINCREF(entry);  // the call may clear the table (a provider changing priorities)
  Py_DECREF(table);
  if (entry == nullptr) {
    PyObject* result = nullptr;
    if (PyErr_Occurred()) {
      Py_XDECREF(plan);
    } else if (self->choose == Py_None) {
      Py_XDECREF(plan);
      result = miss(self);
    } else {
      result = choose(self, key, args, nargs, plan);
    }
    Py_DECREF(key);
    return result;
  }
  Py_DECREF(key);
  Py_XDECREF(plan);
  if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 2 || debug_logging_may_be_on(self)) {
    Py_DECREF(entry);
    return miss(self);
  }
  PyObject* result = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 1), args, nargs, nullptr);
  if (result == nullptr) note_failure(self, PyTuple_GET_ITEM(entry, 0));
  Py_DECREF(entry);
  return result;
}

PyObject* fast_call_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *spec, *cache, *scope_var, *name, *log_cache, *note, *sentinel, *op, *choose_fn;
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "FastCall() takes positional arguments only");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "O!O!O!UOOOOO:FastCall", &PyBytes_Type, &spec, &PyDict_Type, &cache,
                        &PyContextVar_Type, &scope_var, &name, &log_cache, &note, &sentinel, &op, &choose_fn)) {
    return nullptr;
  }
  if (choose_fn != Py_None && !PyCallable_Check(choose_fn)) {
    PyErr_SetString(PyExc_TypeError, "FastCall(): choose must be callable or None");
    return nullptr;
  }
  if (log_cache != Py_None && !PyDict_CheckExact(log_cache)) {
    PyErr_SetString(PyExc_TypeError, "FastCall(): log_cache must be a dict or None");
    return nullptr;
  }
  auto* self = reinterpret_cast<FastCall*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->vectorcall = fast_call;
  PyObject* fields[] = {spec, cache, scope_var, name, log_cache, note, sentinel, op, choose_fn};
  PyObject** slots[] = {&self->spec,      &self->cache,        &self->scope_var, &self->name, &self->log_cache,
                        &self->note_failure, &self->miss,      &self->op,        &self->choose};
  for (int i = 0; i < 9; ++i) {
    Py_INCREF(fields[i]);
    *slots[i] = fields[i];
  }
  return reinterpret_cast<PyObject*>(self);
}

int fast_call_traverse(PyObject* obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<FastCall*>(obj);
  Py_VISIT(self->cache);
  Py_VISIT(self->scope_var);
  Py_VISIT(self->log_cache);
  Py_VISIT(self->note_failure);
  Py_VISIT(self->miss);
  Py_VISIT(self->op);
  Py_VISIT(self->choose);
  Py_VISIT(self->scope_type);
  return 0;
}

int fast_call_clear(PyObject* obj) {
  auto* self = reinterpret_cast<FastCall*>(obj);
  Py_CLEAR(self->spec);
  Py_CLEAR(self->cache);
  Py_CLEAR(self->scope_var);
  Py_CLEAR(self->name);
  Py_CLEAR(self->log_cache);
  Py_CLEAR(self->note_failure);
  Py_CLEAR(self->miss);
  Py_CLEAR(self->op);
  Py_CLEAR(self->choose);
  Py_CLEAR(self->scope_type);
  return 0;
}

void fast_call_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  fast_call_clear(obj);
  Py_TYPE(obj)->tp_free(obj);
}

PyMemberDef kMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FastCall, vectorcall), READONLY, nullptr},
    {"name", T_OBJECT, offsetof(FastCall, name), READONLY, "the op's name"},
    {nullptr, 0, 0, 0, nullptr}};

PyTypeObject FastCallType = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "ircore._signature_ext.FastCall";
  t.tp_basicsize = sizeof(FastCall);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_doc = "An op's eager call when its signature's choice is remembered (see fast_call.cpp).";
  t.tp_new = fast_call_new;
  t.tp_dealloc = fast_call_dealloc;
  t.tp_traverse = fast_call_traverse;
  t.tp_clear = fast_call_clear;
  t.tp_call = PyVectorcall_Call;
  t.tp_vectorcall_offset = offsetof(FastCall, vectorcall);
  t.tp_members = kMembers;
  return t;
}();

}  // namespace

int ircore::add_fast_call_type(PyObject* module) {
  g_plans = PyUnicode_InternFromString("plans");
  g_debug = PyLong_FromLong(10);
  g_plan = PyUnicode_InternFromString("_plan");
  if (g_plans == nullptr || g_debug == nullptr || g_plan == nullptr) return -1;
  if (PyType_Ready(&FastCallType) < 0) return -1;
  Py_INCREF(&FastCallType);
  if (PyModule_AddObject(module, "FastCall", reinterpret_cast<PyObject*>(&FastCallType)) < 0) {
    Py_DECREF(&FastCallType);
    return -1;
  }
  return 0;
}
