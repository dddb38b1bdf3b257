// csrc/bindings/slot_call.cpp: the registry's state and the walk of one call over a slot's
// candidates (see slot_call.h).
#include "slot_call.h"

#include <cstring>
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

std::string impl_label(const Entry &e, const std::string &slot) {
    return "implementation '" + e.info.name + "' of slot '" + slot + "'";
}

/// 1/0 for True/False (and numpy's bool scalar, which np.all() and friends return), -1 for
/// anything else: 1, "yes", [0], NaN or a tensor are predicate errors, not truth values (a
/// tensor's truth would also synchronize its device on every call).
int strict_truth(PyObject *r) {
    if (r == Py_True)
        return 1;
    if (r == Py_False)
        return 0;
    const char *type = Py_TYPE(r)->tp_name;
    if (std::strcmp(type, "numpy.bool") == 0 || std::strcmp(type, "numpy.bool_") == 0)
        return PyObject_IsTrue(r);
    return -1;
}

/// Runs a predicate (with the call's arguments, or none for an environment predicate). An
/// exception or a result that is not a bool counts as "no" and warns once per registration;
/// a BaseException that is not an Exception (KeyboardInterrupt...) propagates.
bool predicate_holds(const Entry &e, const std::string &slot, PyObject *const *args,
                     size_t nargsf, PyObject *kwnames) {
    PyObject *r = PyObject_Vectorcall(e.impl.predicate.ptr(), args, nargsf, kwnames);
    if (r) {
        const int truth = strict_truth(r);
        if (truth >= 0) {
            Py_DECREF(r);
            return truth == 1;
        }
        const std::string got = std::string(Py_TYPE(r)->tp_name);
        nb::object shown = nb::steal(PyObject_Repr(r));
        Py_DECREF(r);
        if (!shown.is_valid())
            PyErr_Clear();
        if (!e.impl.counters->predicate_warned.exchange(true))
            warn("turbo_physai.kernels: predicate of " + impl_label(e, slot) + " returned " +
                 (shown.is_valid() ? nb::str(shown).c_str() : "?") + " (" + got +
                 "), not a bool; treated as not eligible (warned once per implementation)");
        return false;
    }
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        throw nb::python_error();
    nb::python_error err;
    if (!e.impl.counters->predicate_warned.exchange(true))
        warn("turbo_physai.kernels: predicate of " + impl_label(e, slot) + " raised " +
             describe_error(err) + "; treated as not eligible (warned once per implementation)");
    return false;
}

/// Whether a class named `name` (in any module) is among `type`'s bases or `type` itself.
bool mro_has(PyObject *type, const char *name) {
    PyObject *mro = reinterpret_cast<PyTypeObject *>(type)->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
        const char *full = reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(mro, i))->tp_name;
        const char *dot = std::strrchr(full, '.');
        const char *base = dot ? dot + 1 : full;
        if (std::strcmp(base, name) == 0)
            return true;
    }
    return false;
}

/// Whether a failure says something about these inputs rather than about the implementation:
/// it ran out of memory, or rejected the inputs (ValueError, TypeError, IndexError,
/// ArithmeticError). Everything else (ImportError, AttributeError, NotImplementedError, other
/// RuntimeErrors such as a failed kernel launch, OSError...) means the implementation is broken.
bool input_specific(const nb::python_error &e) {
    PyObject *type = e.type().ptr();
    for (PyObject *kind : {PyExc_MemoryError, PyExc_ValueError, PyExc_TypeError,
                           PyExc_IndexError, PyExc_ArithmeticError})
        if (PyErr_GivenExceptionMatches(type, kind))
            return true;
    // torch.OutOfMemoryError (CUDA and other device allocators), cupy's and others' alike.
    if (mro_has(type, "OutOfMemoryError"))
        return true;
    // torch's CPU allocator raises a plain RuntimeError.
    if (PyErr_GivenExceptionMatches(type, PyExc_RuntimeError) &&
        !PyErr_GivenExceptionMatches(type, PyExc_NotImplementedError)) {
        const std::string message = nb::str(e.value()).c_str();
        return message.find("DefaultCPUAllocator") != std::string::npos ||
               message.find("out of memory") != std::string::npos;
    }
    return false;
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
           PyObject *kwnames, bool fresh)
    : slot_(slot), args_(args), nargsf_(nargsf), kwnames_(kwnames),
      nargs_(PyVectorcall_NARGS(nargsf)),
      ntotal_(nargs_ + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0)) {
    ensure_loaded();
    const std::string &name = slot_->name();
    candidates_ = state().registry.candidates(
        *slot_,
        [&name](const Entry &e) {
            return !e.impl.environment_predicate() ||
                   predicate_holds(e, name, nullptr, 0, nullptr);
        },
        fresh);
}

const Entry *Call::first(bool per_call) {
    for (const auto &e : *candidates_)
        if (eligible(*e, per_call))
            return e.get();
    return nullptr;
}

std::vector<const Entry *> Call::all(bool per_call) {
    std::vector<const Entry *> out;
    for (const auto &e : *candidates_)
        if (eligible(*e, per_call))
            out.push_back(e.get());
    return out;
}

PyObject *Call::run() {
    std::vector<Failure> failed;
    bool last_declined = false;
    for (const auto &e : *candidates_) {
        if (!eligible(*e, true))
            continue;
        PyObject *result = PyObject_Vectorcall(e->impl.fn.ptr(), args_, nargsf_, kwnames_);
        if (result && result != Py_None) {
            if (failed.empty())
                return result;  // the common case: nothing to settle
            nb::object owned = nb::steal(result);
            settle(failed, e.get());
            return owned.release().ptr();
        }
        if (result) {  // None: "not for these inputs", the next one gets them
            Py_DECREF(result);
            last_declined = true;
            continue;
        }
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return nullptr;  // KeyboardInterrupt, SystemExit: never swallowed
        failed.push_back({e.get(), nb::python_error()});
        last_declined = false;
    }
    if (last_declined) {
        settle(failed, nullptr);
        Py_RETURN_NONE;
    }
    if (!failed.empty()) {
        // Nothing showed that the inputs were fine: the last error (normally the reference's)
        // is the answer and nothing is disabled.
        failed.back().error.restore();
        return nullptr;
    }
    PyErr_Format(PyExc_LookupError,
                 "turbo_physai.kernels: slot '%s' has no eligible implementation for these "
                 "inputs and no reference; callers of such slots check resolve() and keep "
                 "their own portable path",
                 slot_->name().c_str());
    return nullptr;
}

void Call::settle(std::vector<Failure> &failed, const Entry *winner) {
    const std::string &slot = slot_->name();
    const std::string outcome =
        winner ? "'" + winner->info.name + "' ran instead" : "every other one declined them";
    for (Failure &f : failed) {
        const Entry &e = *f.entry;
        // A broken implementation is disabled only once another one succeeded on the same
        // inputs: a RuntimeError from torch can just as well mean bad inputs.
        if (winner && !input_specific(f.error)) {
            if (state().registry.disable(*slot_, e, describe_error(f.error)))
                warn("turbo_physai.kernels: " + impl_label(e, slot) + " failed (" +
                     describe_error(f.error) + ") and is disabled for this process; " + outcome);
            continue;
        }
        e.impl.counters->fallbacks.fetch_add(1, std::memory_order_relaxed);
        if (!e.impl.counters->fallback_warned.exchange(true))
            warn("turbo_physai.kernels: " + impl_label(e, slot) + " failed on these inputs (" +
                 describe_error(f.error) + "); " + outcome +
                 ". It stays enabled: this kind of failure is the inputs' (later ones are "
                 "counted in kernels.implementations(), not reported)");
    }
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
    return !e.impl.call_predicate() ||
           predicate_holds(e, slot_->name(), args_, nargsf_, kwnames_);
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

}  // namespace turbo_physai::bindings
