// csrc/bindings/slot_call.h: the registry of Python implementations and one call through a
// slot: candidates from the core's cache, requirements checked from tensor metadata
// (tensor_view.h), Python run only for the implementation and for predicates asked for. The
// Slot type that owns this path is in kernel_registry.cpp.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kernel_requirements.h"
#include "tensor_view.h"
#include "turbo_physai/kernel_registry.h"

namespace turbo_physai::bindings {

namespace nb = nanobind;

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
State &state();

/// Imports the references the first time a slot is used, and the providers as soon as the
/// selection admits them: with TURBO_PHYSAI_KERNELS=off providers are never imported.
void ensure_loaded();

/// One walk over a slot's candidates for one set of arguments.
class Call {
public:
    Call(const Registry::SlotPtr &slot, PyObject *const *args, size_t nargsf, PyObject *kwnames);

    /// The entry a call would run first, or null. With `per_call` false only the selection
    /// and the export state count (resolve(slot) without inputs).
    const Entry *first(bool per_call);

    /// Runs the first eligible implementation; one that raises hands over to the next. Those
    /// that failed are disabled only once a later one succeeds on the same inputs, so bad
    /// inputs (which the reference rejects too) never disable anything.
    PyObject *run();

private:
    bool eligible(const Entry &e, bool per_call);
    static bool exporting();
    bool meets(const Requirements &req);
    bool predicate_holds(const Entry &e);

    Registry::SlotPtr slot_;
    PyObject *const *args_;
    size_t nargsf_;
    PyObject *kwnames_;
    Py_ssize_t nargs_, ntotal_;
    std::shared_ptr<const Registry::Candidates> candidates_;
    std::vector<TensorView> views_;
    int portable_ = -1, capturing_ = -1;
};

}  // namespace turbo_physai::bindings
