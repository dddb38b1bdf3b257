// csrc/bindings/kernel_registry.cpp: the registry over Python callables, and its per-call path.
//
// A Slot object is a vectorcall type (written against the C API like dispatcher.cpp) because its
// call cost is what the registry adds to every op call: candidates come from the core's cache,
// requirements are checked from tensor metadata (tensor_view.h), Python runs only for the
// implementation itself and for predicates that were asked for.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <structmember.h>  // T_PYSSIZET, READONLY

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kernel_requirements.h"
#include "tensor_view.h"
#include "turbo_physai/kernel_registry.h"

namespace turbo_physai::bindings {
namespace {

struct PyImpl {
    nb::object fn;
    nb::object predicate;  // None: no predicate
    std::shared_ptr<std::atomic<bool>> predicate_warned = std::make_shared<std::atomic<bool>>();
};
using Registry = KernelRegistry<PyImpl>;
using Entry = Registry::Entry;

/// Process-wide state. Leaked on purpose: its Python objects must not be released after the
/// interpreter has finalized.
struct State {
    Registry registry;
    nb::object loader;        // load("references" | "providers")
    nb::object torch_hook;    // installs the probes below once torch has been imported
    nb::object portable;      // () -> bool: jit tracing or ONNX export in progress
    nb::object capturing;     // () -> bool: the current CUDA stream is being captured
    bool references_loaded = false, providers_loaded = false;
    bool loading = false;     // registrations made now come from a provider load
};
State &state() {
    static State *s = new State();
    return *s;
}

std::string describe_error(const nb::python_error &e) {
    return std::string(nb::str(e.type().attr("__name__")).c_str()) + ": " +
           nb::str(e.value()).c_str();
}

void warn(const std::string &message) {
    if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0)
        throw nb::python_error();  // warnings configured as errors
}

bool call_probe(const nb::object &probe) {
    nb::object r = nb::steal(PyObject_CallNoArgs(probe.ptr()));
    if (!r.is_valid())
        throw nb::python_error();
    return PyObject_IsTrue(r.ptr()) == 1;
}

/// Imports the references the first time a slot is used, and the providers as soon as the
/// selection admits them: with TURBO_PHYSAI_KERNELS=off providers are never imported.
void ensure_loaded() {
    State &st = state();
    if (st.providers_loaded || !st.loader.is_valid())
        return;
    struct Loading {
        bool &flag;
        explicit Loading(bool &f) : flag(f) { flag = true; }
        ~Loading() { flag = false; }
    } loading(st.loading);
    if (!st.references_loaded) {
        st.references_loaded = true;
        st.loader("references");
    }
    if (st.registry.selection().mode != Selection::Mode::reference_only) {
        st.providers_loaded = true;
        st.loader("providers");
    }
}

/// One walk over a slot's candidates for one set of arguments.
class Call {
public:
    Call(const Registry::SlotPtr &slot, PyObject *const *args, size_t nargsf, PyObject *kwnames)
        : slot_(slot), args_(args), nargsf_(nargsf), kwnames_(kwnames),
          nargs_(PyVectorcall_NARGS(nargsf)),
          ntotal_(nargs_ + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0)) {
        ensure_loaded();
        candidates_ = state().registry.candidates(*slot_);
    }

    /// The entry a call would run first, or null. With `per_call` false only the selection
    /// and the export state count (resolve(slot) without inputs).
    const Entry *first(bool per_call) {
        for (const auto &e : *candidates_)
            if (eligible(*e, per_call))
                return e.get();
        return nullptr;
    }

    /// Runs the first eligible implementation; one that raises hands over to the next. Those
    /// that failed are disabled only once a later one succeeds on the same inputs, so bad
    /// inputs (which the reference rejects too) never disable anything.
    PyObject *run() {
        std::vector<std::pair<const Entry *, nb::python_error>> failed;
        for (const auto &e : *candidates_) {
            if (!eligible(*e, true))
                continue;
            PyObject *result = PyObject_Vectorcall(e->impl.fn.ptr(), args_, nargsf_, kwnames_);
            if (result) {
                nb::object owned = nb::steal(result);
                for (auto &f : failed)
                    if (state().registry.disable(slot_->name(), f.first->info.name))
                        warn("turbo_physai.kernels: implementation '" + f.first->info.name +
                             "' of slot '" + slot_->name() + "' failed (" +
                             describe_error(f.second) + ") and is disabled for this process; '" +
                             e->info.name + "' ran instead");
                return owned.release().ptr();
            }
            if (e->info.is_reference() || !PyErr_ExceptionMatches(PyExc_Exception))
                return nullptr;  // the reference's verdict on these inputs is the answer
            failed.emplace_back(e.get(), nb::python_error());
        }
        if (!failed.empty()) {
            failed.back().second.restore();
            return nullptr;
        }
        PyErr_Format(PyExc_LookupError,
                     "turbo_physai.kernels: slot '%s' has no eligible implementation for these "
                     "inputs and no reference; callers of such slots check resolve() and keep "
                     "their own portable path",
                     slot_->name().c_str());
        return nullptr;
    }

private:
    bool eligible(const Entry &e, bool per_call) {
        if (e.info.is_reference())
            return true;
        if (portable_ < 0)
            portable_ = exporting();
        if (portable_)
            return false;
        if (!per_call)
            return true;
        if (e.info.requires.any() && !meets(e.info.requires))
            return false;
        return e.impl.predicate.is_none() || predicate_holds(e);
    }

    static bool exporting() {
        State &st = state();
        if (!st.portable.is_valid() && st.torch_hook.is_valid()) {
            // Registering the torch probes needs torch imported; never import it ourselves.
            PyObject *modules = PyImport_GetModuleDict();
            if (PyDict_GetItemString(modules, "torch"))
                st.torch_hook();
        }
        return st.portable.is_valid() && call_probe(st.portable);
    }

    bool meets(const Requirements &req) {
        if (views_.empty()) {
            views_.reserve(ntotal_);
            for (Py_ssize_t i = 0; i < ntotal_; ++i)
                views_.emplace_back(args_[i], tensor_kind(args_[i]));
        }
        auto capturing = [this] {
            if (capturing_ < 0)
                capturing_ = state().capturing.is_valid() && call_probe(state().capturing);
            return capturing_ == 1;
        };
        if (!req.args.empty()) {
            for (int i : req.args)
                if (i >= nargs_ || tensor_kind(args_[i]) == TensorKind::none ||
                    !req.accepts(views_[i], capturing))
                    return false;
            return true;
        }
        for (Py_ssize_t i = 0; i < ntotal_; ++i)
            if (tensor_kind(args_[i]) != TensorKind::none && !req.accepts(views_[i], capturing))
                return false;
        return true;
    }

    bool predicate_holds(const Entry &e) {
        PyObject *r = PyObject_Vectorcall(e.impl.predicate.ptr(), args_, nargsf_, kwnames_);
        const int truth = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (truth >= 0)
            return truth == 1;
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            throw nb::python_error();
        nb::python_error err;
        if (!e.impl.predicate_warned->exchange(true))
            warn("turbo_physai.kernels: predicate of implementation '" + e.info.name +
                 "' of slot '" + slot_->name() + "' raised " + describe_error(err) +
                 "; treated as not eligible (warned once per implementation)");
        return false;
    }

    Registry::SlotPtr slot_;
    PyObject *const *args_;
    size_t nargsf_;
    PyObject *kwnames_;
    Py_ssize_t nargs_, ntotal_;
    std::shared_ptr<const Registry::Candidates> candidates_;
    std::vector<TensorView> views_;
    int portable_ = -1, capturing_ = -1;
};

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
           nb::object requires, bool hub) {
            if (!PyCallable_Check(fn.ptr()))
                throw nb::type_error(("implementation '" + name + "' for slot '" + slot +
                                      "' must be callable")
                                         .c_str());
            if (!predicate.is_none() && !PyCallable_Check(predicate.ptr()))
                throw nb::type_error(("predicate of implementation '" + name + "' for slot '" +
                                      slot + "' must be callable or None")
                                         .c_str());
            ImplInfo info;
            info.name = name;
            info.hub = hub;
            info.provider = state().loading;
            if (!requires.is_none())
                info.requires = parse_requirements(requires, slot, name);
            state().registry.add(slot, std::move(info), PyImpl{fn, predicate});
        },
        nb::arg("slot"), nb::arg("fn"), nb::arg("name"), nb::arg("predicate").none(),
        nb::arg("requires").none(), nb::arg("hub") = false);
    m.def("kernel_unregister", [](const std::string &slot, const std::string &name) {
        state().registry.remove(slot, name);
    });
    m.def("kernel_slots", [] { return state().registry.slot_names(); });
    m.def("kernel_implementations", [](const std::string &slot) {
        nb::list out;
        Registry &r = state().registry;
        if (Registry::SlotPtr s = r.find(slot)) {
            for (const auto &e : r.entries(*s)) {
                nb::dict d;
                d["name"] = e->info.name;
                d["impl"] = e->impl.fn;
                d["predicate"] = e->impl.predicate;
                d["requires"] = requirements_dict(e->info.requires);
                d["hub"] = e->info.hub;
                d["disabled"] = r.is_disabled(*s, e->info.name);
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
