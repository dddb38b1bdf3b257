// csrc/bindings/slot_call.h: the registry of Python implementations and one call through a
// slot: candidates from the core's cache, requirements checked from tensor metadata
// (tensor_view.h), Python run only for the implementation and for predicates asked for. The
// Slot type that owns this path is in kernel_registry.cpp.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernel_requirements.h"
#include "tensor_view.h"
#include "turbo_physai/kernel_registry.h"

namespace turbo_physai::bindings {

namespace nb = nanobind;

/// What happened to one registration so far; shared by the copies of its PyImpl.
struct ImplCounters {
    std::atomic<bool> predicate_warned{false};  // a predicate error was reported
    std::atomic<bool> fallback_warned{false};   // an input-specific failure was reported
    std::atomic<std::uint64_t> fallbacks{0};    // calls it failed on and handed over
};

struct PyImpl {
    nb::object fn;
    nb::object predicate;  // None: no predicate
    /// How the predicate is called, decided once at registration (kernels.register reads its
    /// signature): with the call's arguments on every call, or with none (an environment
    /// predicate: evaluated when the slot's candidate list is built, cached with it).
    bool predicate_per_call = true;
    std::shared_ptr<ImplCounters> counters = std::make_shared<ImplCounters>();

    bool environment_predicate() const { return !predicate.is_none() && !predicate_per_call; }
    bool call_predicate() const { return !predicate.is_none() && predicate_per_call; }
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
    /// `fresh`: re-admit the slot's implementations (environment predicates included) instead
    /// of using the cached candidate list, as kernels.iter_impls does.
    Call(const Registry::SlotPtr &slot, PyObject *const *args, size_t nargsf, PyObject *kwnames,
         bool fresh = false);

    /// The entry a call would run first, or null. With `per_call` false only the selection,
    /// the environment predicates and the export state count (resolve(slot) without inputs).
    const Entry *first(bool per_call);

    /// Every entry a call would try, in order (kernels.iter_impls).
    std::vector<const Entry *> all(bool per_call);

    /// Runs the eligible implementations in order until one returns a result; None declines,
    /// an exception hands over to the next. What a failure meant is settled by the outcome
    /// (see docs/kernels.md, "Fallback rules").
    PyObject *run();

private:
    struct Failure {
        const Entry *entry;
        nb::python_error error;
    };
    void settle(std::vector<Failure> &failed, const Entry *winner);
    bool eligible(const Entry &e, bool per_call);
    static bool exporting();
    bool meets(const Requirements &req);

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
