// csrc/bindings/slot_call.cpp: the registry's state and the walk of one call over a slot's
// candidates (see slot_call.h).
#include "slot_call.h"

#include <utility>

namespace turbo_physai::bindings {
namespace {

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

}  // namespace

State &state() {
    static State *s = new State();
    return *s;
}

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

Call::Call(const Registry::SlotPtr &slot, PyObject *const *args, size_t nargsf,
           PyObject *kwnames)
    : slot_(slot), args_(args), nargsf_(nargsf), kwnames_(kwnames),
      nargs_(PyVectorcall_NARGS(nargsf)),
      ntotal_(nargs_ + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0)) {
    ensure_loaded();
    candidates_ = state().registry.candidates(*slot_);
}

const Entry *Call::first(bool per_call) {
    for (const auto &e : *candidates_)
        if (eligible(*e, per_call))
            return e.get();
    return nullptr;
}

PyObject *Call::run() {
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

bool Call::eligible(const Entry &e, bool per_call) {
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

bool Call::exporting() {
    State &st = state();
    if (!st.portable.is_valid() && st.torch_hook.is_valid()) {
        // Registering the torch probes needs torch imported; never import it ourselves.
        PyObject *modules = PyImport_GetModuleDict();
        if (PyDict_GetItemString(modules, "torch"))
            st.torch_hook();
    }
    return st.portable.is_valid() && call_probe(st.portable);
}

bool Call::meets(const Requirements &req) {
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

bool Call::predicate_holds(const Entry &e) {
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

}  // namespace turbo_physai::bindings
