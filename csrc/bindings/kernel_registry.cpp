// csrc/bindings/kernel_registry.cpp: the registry over Python callables: the Slot type and the
// registration functions.
//
// A Slot object is a vectorcall type (written against the C API like dispatcher.cpp) because its
// call cost is what the registry adds to every op call; the call itself is slot_call.cpp's.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <structmember.h>  // T_PYSSIZET, READONLY

#include <string>
#include <utility>

#include "bindings.h"
#include "kernel_requirements.h"
#include "slot_call.h"

namespace turbo_physai::bindings {
namespace {

// ---- Slot: the per-slot callable ---------------------------------------------------------

struct SlotObject {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Registry::SlotPtr slot;
};

template <class F>
PyObject *guarded(F &&f) {
    try {
        return f();
    } catch (nb::python_error &e) {
        e.restore();
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    return nullptr;
}

PyObject *slot_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    auto *s = reinterpret_cast<SlotObject *>(self);
    return guarded([&] { return Call(s->slot, args, nargsf, kwnames).run(); });
}

PyObject *slot_select(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwn) {
    auto *s = reinterpret_cast<SlotObject *>(self);
    return guarded([&]() -> PyObject * {
        const bool per_call = nargs > 0 || (kwn && PyTuple_GET_SIZE(kwn) > 0);
        const Entry *e = Call(s->slot, args, static_cast<size_t>(nargs), kwn).first(per_call);
        return Py_NewRef(e ? e->impl.fn.ptr() : Py_None);
    });
}

PyObject *slot_eligible(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwn) {
    auto *s = reinterpret_cast<SlotObject *>(self);
    return guarded([&]() -> PyObject * {
        const bool per_call = nargs > 0 || (kwn && PyTuple_GET_SIZE(kwn) > 0);
        Call call(s->slot, args, static_cast<size_t>(nargs), kwn, /*fresh=*/true);
        nb::list out;
        for (const Entry *e : call.all(per_call))
            out.append(nb::make_tuple(e->info.name, e->impl.fn));
        return out.release().ptr();
    });
}

PyObject *slot_select_name(PyObject *self, PyObject *) {
    auto *s = reinterpret_cast<SlotObject *>(self);
    return guarded([&]() -> PyObject * {
        const Entry *e = Call(s->slot, nullptr, 0, nullptr).first(false);
        return PyUnicode_FromString(e ? e->info.name.c_str() : "unavailable");
    });
}

void slot_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    reinterpret_cast<SlotObject *>(self)->slot.~shared_ptr();
    type->tp_free(self);
    Py_DECREF(type);
}

PyObject *slot_repr(PyObject *self) {
    return PyUnicode_FromFormat("<turbo_physai kernel slot '%s'>",
                                reinterpret_cast<SlotObject *>(self)->slot->name().c_str());
}

PyObject *slot_name(PyObject *self, void *) {
    return PyUnicode_FromString(reinterpret_cast<SlotObject *>(self)->slot->name().c_str());
}

PyMemberDef slot_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SlotObject, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};
PyGetSetDef slot_getset[] = {{"name", slot_name, nullptr, "The slot's name.", nullptr},
                             {"__name__", slot_name, nullptr, nullptr, nullptr},
                             {nullptr, nullptr, nullptr, nullptr, nullptr}};
PyMethodDef slot_methods[] = {
    {"select", reinterpret_cast<PyCFunction>(reinterpret_cast<void *>(slot_select)),
     METH_FASTCALL | METH_KEYWORDS,
     "select(*args, **kwargs): the implementation a call with these inputs would run, or None."},
    {"eligible", reinterpret_cast<PyCFunction>(reinterpret_cast<void *>(slot_eligible)),
     METH_FASTCALL | METH_KEYWORDS,
     "eligible(*args, **kwargs): [(name, impl)] a call would try, in order; environment "
     "predicates are re-evaluated."},
    {"active", slot_select_name, METH_NOARGS,
     "Name of the implementation a call would try first, or 'unavailable'."},
    {nullptr, nullptr, 0, nullptr}};
PyType_Slot slot_type_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void *>(slot_dealloc)},
    {Py_tp_call, reinterpret_cast<void *>(PyVectorcall_Call)},
    {Py_tp_repr, reinterpret_cast<void *>(slot_repr)},
    {Py_tp_members, slot_members},
    {Py_tp_getset, slot_getset},
    {Py_tp_methods, slot_methods},
    {Py_tp_doc, const_cast<char *>("A kernel slot: calling it runs the first eligible "
                                   "implementation, falling back to the next.")},
    {0, nullptr}};
PyType_Spec slot_spec = {"turbo_physai._core.Slot", sizeof(SlotObject), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, slot_type_slots};

PyTypeObject *slot_type = nullptr;

nb::object make_slot(const std::string &name) {
    check_slot_name(name);
    auto *obj = reinterpret_cast<SlotObject *>(slot_type->tp_alloc(slot_type, 0));
    if (!obj)
        throw nb::python_error();
    obj->vectorcall = slot_call;
    new (&obj->slot) Registry::SlotPtr(state().registry.slot(name));
    return nb::steal(reinterpret_cast<PyObject *>(obj));
}

}  // namespace

void bind_kernel_registry(nb::module_ &m) {
    slot_type = reinterpret_cast<PyTypeObject *>(PyType_FromSpec(&slot_spec));
    if (!slot_type)
        throw nb::python_error();
    m.attr("Slot") = nb::borrow(reinterpret_cast<PyObject *>(slot_type));
    m.def("kernel_slot", &make_slot, "The callable of a slot (created empty on first use).");
    m.def(
        "kernel_register",
        [](const std::string &slot, nb::object fn, const std::string &name, nb::object predicate,
           nb::object requires, bool hub, bool predicate_per_call) {
            const std::string label = "implementation '" + name + "' for slot '" + slot + "'";
            if (!PyCallable_Check(fn.ptr()))
                throw nb::type_error((label + " must be callable").c_str());
            if (!predicate.is_none() && !PyCallable_Check(predicate.ptr()))
                throw nb::type_error(("predicate of " + label + " must be callable or None")
                                         .c_str());
            ImplInfo info;
            info.name = name;
            info.hub = hub;
            info.provider = state().loading;
            if (info.is_reference() && !(predicate.is_none() && requires.is_none()))
                throw nb::value_error(("the reference of slot '" + slot +
                                       "' runs for every input (it is the last resort): it "
                                       "takes no predicate and no requires")
                                          .c_str());
            if (!requires.is_none())
                info.requires = parse_requirements(requires, slot, name);
            state().registry.add(slot, std::move(info),
                                 PyImpl{fn, predicate, predicate_per_call});
        },
        nb::arg("slot"), nb::arg("fn"), nb::arg("name"), nb::arg("predicate").none(),
        nb::arg("requires").none(), nb::arg("hub") = false, nb::arg("predicate_per_call") = true);
    m.def("kernel_unregister",
          [](const std::string &slot, const std::string &name) {
              return state().registry.remove(slot, name);
          },
          "Removes an implementation; False when the slot has none of that name.");
    m.def("kernel_clear_cache", [] { state().registry.clear(); },
          "Drops every slot's cached candidates: environment predicates run again.");
    m.def("kernel_slots", [] { return state().registry.slot_names(); });
    m.def("kernel_implementations", [](const std::string &slot) {
        nb::list out;
        Registry &r = state().registry;
        if (Registry::SlotPtr s = r.find(slot)) {
            for (const auto &e : r.entries(*s)) {
                const PyImpl &impl = e->impl;
                nb::dict d;
                d["name"] = e->info.name;
                d["impl"] = impl.fn;
                d["predicate"] = impl.predicate;
                d["predicate_kind"] = impl.predicate.is_none() ? nb::object(nb::none())
                                      : impl.predicate_per_call ? nb::object(nb::str("call"))
                                                                : nb::object(nb::str("environment"));
                d["requires"] = requirements_dict(e->info.requires);
                d["hub"] = e->info.hub;
                d["disabled"] = e->disabled();
                const std::string failure = r.failure(*e);
                d["failure"] = failure.empty() ? nb::object(nb::none())
                                               : nb::object(nb::str(failure.c_str()));
                d["fallbacks"] = impl.counters->fallbacks.load(std::memory_order_relaxed);
                out.append(d);
            }
        }
        return out;
    });
    m.def("kernel_selection", [] {
        const Selection sel = state().registry.selection();
        nb::dict d;
        d["mode"] = sel.mode == Selection::Mode::all              ? "all"
                    : sel.mode == Selection::Mode::reference_only ? "reference"
                                                                  : "named";
        d["name"] = sel.name;
        d["hub"] = sel.hub;
        return d;
    });
    m.def("kernel_load", &ensure_loaded, "Import references and admitted providers now.");
    m.def("kernel_set_hooks",
          [](nb::object loader, nb::object torch_hook) {
              state().loader = std::move(loader);
              state().torch_hook = std::move(torch_hook);
          },
          "loader(part) imports 'references' or 'providers' on first use; torch_hook() installs "
          "the torch probes once torch is imported.");
    m.def("kernel_set_probes", [](nb::object portable, nb::object capturing) {
        state().portable = std::move(portable);
        state().capturing = std::move(capturing);
    });
}

}  // namespace turbo_physai::bindings
