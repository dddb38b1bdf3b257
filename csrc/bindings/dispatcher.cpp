// csrc/bindings/dispatcher.cpp: the runtime-condition dispatcher, a vectorcall descriptor type.
//
// Written against the CPython C API rather than nb::class_ because it needs three things nanobind
// classes do not offer together: its own vectorcall slot (the per-call cost is the whole point),
// a `__get__` that binds like a Python function, and a per-instance `__dict__` so that
// `__wrapped__`, `__name__`, `__doc__`... read exactly like functools.wraps output.
#include <atomic>
#include <cstdint>
#include <new>

#include "bindings.h"

#include <structmember.h>  // T_PYSSIZET etc.; the Py_T_* spellings need Python 3.12

namespace turbo_physai::bindings {
namespace {

struct Dispatcher {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *original;
    PyObject *replacement;
    PyObject *condition;
    PyObject *condition_name;  // str used in error messages
    PyObject *dict;
    PyObject *weakrefs;
    const Switch *transition;  // the condition when it is a group's Switch (a gate), else null
    std::atomic<std::uint64_t> hits[2];  // [0]: original, [1]: replacement
};

inline PyObject *call_branch(Dispatcher *d, int branch, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
    d->hits[branch].fetch_add(1, std::memory_order_relaxed);
    return PyObject_Vectorcall(branch ? d->replacement : d->original, args, nargsf, kwnames);
}

PyObject *dispatch(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    auto *d = reinterpret_cast<Dispatcher *>(self);
    PyObject *verdict = PyObject_Vectorcall(d->condition, args, nargsf, kwnames);
    if (!verdict)
        return nullptr;  // the condition's exception propagates: never a silent fallback
    if (!PyBool_Check(verdict)) {
        PyErr_Format(PyExc_TypeError, "runtime_condition %R returned %s, expected bool",
                     d->condition_name, Py_TYPE(verdict)->tp_name);
        Py_DECREF(verdict);
        return nullptr;
    }
    const int branch = verdict == Py_True ? 1 : 0;
    Py_DECREF(verdict);
    return call_branch(d, branch, args, nargsf, kwnames);
}

// A group's gate during a transition (its condition is a Switch): its own vectorcall, so that a
// runtime_condition Dispatcher's call path is exactly what it was.
PyObject *gate_dispatch(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    auto *d = reinterpret_cast<Dispatcher *>(self);
    const int branch = switch_routes_new(*d->transition);
    if (branch < 0)
        return nullptr;
    return call_branch(d, branch, args, nargsf, kwnames);
}

PyObject *dispatcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static const char *keywords[] = {"original", "replacement", "condition", "condition_name",
                                     nullptr};
    PyObject *original, *replacement, *condition, *name = nullptr;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|U:Dispatcher",
                                     const_cast<char **>(keywords), &original, &replacement,
                                     &condition, &name))
        return nullptr;
    const char *roles[] = {"original", "replacement", "condition"};
    PyObject *given[] = {original, replacement, condition};
    const Switch *transition = as_switch(condition);  // a Switch is asked natively, not called
    for (int i = 0; i < 3; ++i)
        if (!PyCallable_Check(given[i]) && !(i == 2 && transition))
            return PyErr_Format(PyExc_TypeError, "Dispatcher %s must be callable, got %s",
                                roles[i], Py_TYPE(given[i])->tp_name);

    auto *d = reinterpret_cast<Dispatcher *>(type->tp_alloc(type, 0));
    if (!d)
        return nullptr;
    new (&d->hits[0]) std::atomic<std::uint64_t>(0);
    new (&d->hits[1]) std::atomic<std::uint64_t>(0);
    d->vectorcall = transition ? gate_dispatch : dispatch;
    d->transition = transition;
    d->original = Py_NewRef(original);
    d->replacement = Py_NewRef(replacement);
    d->condition = Py_NewRef(condition);
    d->condition_name = name ? Py_NewRef(name) : PyObject_Repr(condition);
    d->dict = PyDict_New();
    PyObject *self = reinterpret_cast<PyObject *>(d);
    if (!d->condition_name || !d->dict) {
        Py_DECREF(self);
        return nullptr;
    }
    // functools.update_wrapper's contract: copy the identity attributes and __dict__ of the
    // original, and point __wrapped__ at it so inspect.signature reports its signature.
    for (const char *attr : {"__module__", "__name__", "__qualname__", "__doc__"}) {
        PyObject *value = PyObject_GetAttrString(original, attr);
        if (!value) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
                Py_DECREF(self);
                return nullptr;
            }
            PyErr_Clear();
            continue;
        }
        int rc = PyDict_SetItemString(d->dict, attr, value);
        Py_DECREF(value);
        if (rc < 0) {
            Py_DECREF(self);
            return nullptr;
        }
    }
    PyObject *original_dict = PyObject_GetAttrString(original, "__dict__");
    if (original_dict && PyDict_Check(original_dict)) {
        if (PyDict_Update(d->dict, original_dict) < 0) {
            Py_DECREF(original_dict);
            Py_DECREF(self);
            return nullptr;
        }
    }
    Py_XDECREF(original_dict);
    PyErr_Clear();  // builtins have no __dict__
    if (PyDict_SetItemString(d->dict, "__wrapped__", original) < 0) {
        Py_DECREF(self);
        return nullptr;
    }
    return self;
}

int dispatcher_traverse(PyObject *self, visitproc visit, void *arg) {
    auto *d = reinterpret_cast<Dispatcher *>(self);
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(d->original);
    Py_VISIT(d->replacement);
    Py_VISIT(d->condition);
    Py_VISIT(d->condition_name);
    Py_VISIT(d->dict);
    return 0;
}

int dispatcher_clear(PyObject *self) {
    auto *d = reinterpret_cast<Dispatcher *>(self);
    Py_CLEAR(d->original);
    Py_CLEAR(d->replacement);
    Py_CLEAR(d->condition);
    Py_CLEAR(d->condition_name);
    Py_CLEAR(d->dict);
    return 0;
}

void dispatcher_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (reinterpret_cast<Dispatcher *>(self)->weakrefs)
        PyObject_ClearWeakRefs(self);
    dispatcher_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

// Binds like a plain function: through the class it is itself, through an instance a method.
PyObject *dispatcher_get(PyObject *self, PyObject *obj, PyObject *) {
    if (!obj || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

PyObject *dispatcher_repr(PyObject *self) {
    auto *d = reinterpret_cast<Dispatcher *>(self);
    return PyUnicode_FromFormat("<turbo_physai Dispatcher of %R, condition %R>", d->original,
                                d->condition_name);
}

PyObject *dispatcher_counts(PyObject *self, void *) {
    auto *d = reinterpret_cast<Dispatcher *>(self);
    return Py_BuildValue("{s:K,s:K}", "replacement",
                         static_cast<unsigned long long>(d->hits[1].load()), "original",
                         static_cast<unsigned long long>(d->hits[0].load()));
}

PyObject *dispatcher_reset_counts(PyObject *self, PyObject *) {
    auto *d = reinterpret_cast<Dispatcher *>(self);
    d->hits[0].store(0);
    d->hits[1].store(0);
    Py_RETURN_NONE;
}

PyMemberDef dispatcher_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Dispatcher, vectorcall), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(Dispatcher, dict), READONLY, nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(Dispatcher, weakrefs), READONLY, nullptr},
    {"original", T_OBJECT_EX, offsetof(Dispatcher, original), READONLY,
     "The object the condition routes to when it returns False."},
    {"replacement", T_OBJECT_EX, offsetof(Dispatcher, replacement), READONLY,
     "The object the condition routes to when it returns True."},
    {"condition", T_OBJECT_EX, offsetof(Dispatcher, condition), READONLY,
     "cond(*args, **kwargs) -> bool, called with exactly the target's arguments."},
    {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef dispatcher_getset[] = {
    {"counts", dispatcher_counts, nullptr, "Calls per branch: {'replacement': n, 'original': m}.",
     nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMethodDef dispatcher_methods[] = {
    {"reset_counts", dispatcher_reset_counts, METH_NOARGS, "Set both branch counters to zero."},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot dispatcher_slots[] = {
    {Py_tp_new, reinterpret_cast<void *>(dispatcher_new)},
    {Py_tp_dealloc, reinterpret_cast<void *>(dispatcher_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void *>(dispatcher_traverse)},
    {Py_tp_clear, reinterpret_cast<void *>(dispatcher_clear)},
    {Py_tp_call, reinterpret_cast<void *>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void *>(dispatcher_get)},
    {Py_tp_repr, reinterpret_cast<void *>(dispatcher_repr)},
    {Py_tp_members, dispatcher_members},
    {Py_tp_getset, dispatcher_getset},
    {Py_tp_methods, dispatcher_methods},
    {Py_tp_doc, const_cast<char *>(
                    "Dispatcher(original, replacement, condition, condition_name=None)\n\n"
                    "Calls replacement when condition(*args, **kwargs) is True, original when it\n"
                    "is False; any other result raises TypeError. Binds like a function.\n"
                    "A Switch as condition makes it a group's gate during a transition.")},
    {0, nullptr}};

PyType_Spec dispatcher_spec = {
    "turbo_physai._core.Dispatcher", sizeof(Dispatcher), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
        Py_TPFLAGS_METHOD_DESCRIPTOR,
    dispatcher_slots};

}  // namespace

void bind_dispatcher(nb::module_ &m) {
    PyObject *type = PyType_FromSpec(&dispatcher_spec);
    if (!type)
        throw nb::python_error();
    m.attr("Dispatcher") = nb::steal(type);
}

}  // namespace turbo_physai::bindings
