// csrc/core/include/turbo_physai/kernel_registry.h: the kernel registry's slot table and rules.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace turbo_physai {

/// Device kinds an implementation can ask for; one bit each in `Requirements::devices`.
enum class Device : std::uint8_t { cpu, cuda, meta, mps, xpu, other };
/// Element types, named as torch names them; one bit each in `Requirements::dtypes`.
enum class DType : std::uint8_t {
    bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,
    float8_e4m3fn, float8_e5m2, complex64, complex128, other
};

/// Parses "cpu", "float32", ...; throws std::invalid_argument listing the accepted names.
Device device_from_name(const std::string &name);
DType dtype_from_name(const std::string &name);
const char *device_name(Device device);
const char *dtype_name(DType dtype);

/// What an implementation needs from its tensor arguments, checked from metadata alone so that
/// the common per-call eligibility tests cost no Python predicate call.
struct Requirements {
    std::uint32_t devices = 0;  ///< bit (1 << Device); 0 accepts any device
    std::uint32_t dtypes = 0;   ///< bit (1 << DType); 0 accepts any dtype
    bool contiguous = false;
    int min_rank = 0;
    int max_rank = -1;               ///< -1: no upper bound
    bool graph_capture = true;       ///< false: decline CUDA tensors while a graph is captured
    std::vector<int> args;           ///< positional indices checked; empty: every tensor argument

    bool any() const {
        return devices || dtypes || contiguous || min_rank > 0 || max_rank >= 0 || !graph_capture;
    }

    /// `Tensor` provides device(), dtype(), rank() and contiguous(); the bindings compute each
    /// lazily, so a requirement that does not mention a property never pays for reading it.
    /// `capturing()` is asked only for CUDA tensors of an implementation that refuses capture.
    template <class Tensor, class Capturing>
    bool accepts(Tensor &t, Capturing &&capturing) const {
        if (devices && !(devices & (1u << static_cast<unsigned>(t.device()))))
            return false;
        if (dtypes && !(dtypes & (1u << static_cast<unsigned>(t.dtype()))))
            return false;
        if (min_rank > 0 || max_rank >= 0) {
            const int rank = t.rank();
            if (rank < min_rank || (max_rank >= 0 && rank > max_rank))
                return false;
        }
        if (contiguous && !t.contiguous())
            return false;
        if (!graph_capture && t.device() == Device::cuda && capturing())
            return false;
        return true;
    }
};

/// Describes one registered implementation; the payload (the callable itself) lives beside it.
struct ImplInfo {
    std::string name;
    Requirements requires;
    bool hub = false;  ///< loaded through the hub provider: off when TURBO_PHYSAI_HUB_KERNELS=0
    /// Registered by a provider load. Providers load lazily, on first use, yet rank as if they
    /// had registered at import: before every registration made by the program itself, so a
    /// user's register() always counts as newer than the built-in kernels.
    bool provider = false;

    bool is_reference() const { return name == kReference; }
    static constexpr const char *kReference = "reference";
};

/// The override variables, parsed. TURBO_PHYSAI_KERNELS=off|reference keeps the references only;
/// any other non-empty value keeps only implementations of that name (and the references).
struct Selection {
    enum class Mode { all, reference_only, named };
    Mode mode = Mode::all;
    std::string name;
    bool hub = true;

    static constexpr const char *kKernelsVar = "TURBO_PHYSAI_KERNELS";
    static constexpr const char *kHubVar = "TURBO_PHYSAI_HUB_KERNELS";

    /// Null pointers read as unset variables.
    static Selection parse(const char *kernels, const char *hub);
    bool admits(const ImplInfo &info) const;
};

/// Rejects names that could never be selected or told apart: an empty slot or implementation
/// name, surrounding whitespace (TURBO_PHYSAI_KERNELS is trimmed), and "off" or "reference" in
/// another case than the reference's own name (TURBO_PHYSAI_KERNELS reads them as "references
/// only"). Throws std::invalid_argument naming the slot and the name.
void check_slot_name(const std::string &slot);
void check_names(const std::string &slot, const std::string &impl);

/// Reads the override variables and tells whether they changed since the previous read. Not
/// thread-safe on its own: the registry calls it under its mutex.
class EnvironmentWatch {
public:
    /// True when either variable differs from the previous call (and on the first call).
    bool refresh();
    const Selection &selection() const { return selection_; }

private:
    bool seen_ = false;
    bool set_[2] = {false, false};
    std::string values_[2];
    Selection selection_;
};

/// Slot table: per slot, implementations in registration order. Candidates for a call are the
/// admitted, enabled implementations newest first with the reference last. Candidate lists are
/// cached per slot and rebuilt after any register/unregister/disable, an override-variable
/// change or clear(). `Impl` is the payload (a Python callable and predicate in the bindings);
/// it is copied into shared, immutable entries so a call can run without holding the lock.
template <class Impl>
class KernelRegistry {
public:
    /// One registration. Its disabled state belongs to it, not to its name: a new registration
    /// under the name of a disabled (and unregistered) one starts enabled.
    struct Entry {
        Entry(ImplInfo i, Impl p) : info(std::move(i)), impl(std::move(p)) {}
        ImplInfo info;
        Impl impl;

        bool disabled() const { return disabled_.load(std::memory_order_acquire); }

    private:
        friend class KernelRegistry;
        mutable std::atomic<bool> disabled_{false};
        mutable std::string failure_;  // why it was disabled; guarded by the registry's mutex
    };
    using EntryPtr = std::shared_ptr<const Entry>;
    using Candidates = std::vector<EntryPtr>;

    class Slot {
    public:
        explicit Slot(std::string name) : name_(std::move(name)) {}
        const std::string &name() const { return name_; }

    private:
        friend class KernelRegistry;
        std::string name_;
        std::vector<EntryPtr> entries_;  // registration order
        std::uint64_t generation_ = 0;   // bumped by every change to entries_ or their state
        std::shared_ptr<const Candidates> cached_;
        std::uint64_t cached_generation_ = 0, cached_epoch_ = 0;
    };
    using SlotPtr = std::shared_ptr<Slot>;

    /// The named slot, created empty on first use; the pointer stays valid for the process.
    SlotPtr slot(const std::string &name) {
        std::lock_guard<std::mutex> lock(mutex_);
        SlotPtr &s = slots_[name];
        if (!s)
            s = std::make_shared<Slot>(name);
        return s;
    }

    /// Null when no such slot exists (lookups return an optional, they never create).
    SlotPtr find(const std::string &name) const {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = slots_.find(name);
        return it == slots_.end() ? nullptr : it->second;
    }

    std::vector<std::string> slot_names() const {
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<std::string> names;
        for (const auto &kv : slots_)
            names.push_back(kv.first);
        return names;
    }

    /// Throws std::invalid_argument for a name check_names() rejects or a duplicate name.
    void add(const std::string &slot_name, ImplInfo info, Impl impl) {
        check_names(slot_name, info.name);
        SlotPtr s = slot(slot_name);
        std::lock_guard<std::mutex> lock(mutex_);
        for (const EntryPtr &e : s->entries_)
            if (e->info.name == info.name)
                throw std::invalid_argument("slot '" + slot_name +
                                            "' already has an implementation named '" +
                                            info.name + "'; unregister it first");
        auto at = s->entries_.end();
        if (info.provider)
            at = std::find_if(s->entries_.begin(), s->entries_.end(),
                              [](const EntryPtr &e) { return !e->info.provider; });
        s->entries_.insert(at, std::make_shared<const Entry>(std::move(info), std::move(impl)));
        changed(*s);
    }

    /// Removes the named implementation; false (and nothing changes) when there is none, as
    /// unregistering something absent is how a cleanup that may run twice stays simple.
    bool remove(const std::string &slot_name, const std::string &impl_name) {
        SlotPtr s = find(slot_name);
        if (!s)
            return false;
        // Released after the lock: dropping the payload may run arbitrary code (a Python
        // __del__) that calls back into the registry.
        EntryPtr removed;
        std::shared_ptr<const Candidates> stale;
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = s->entries_.begin(); it != s->entries_.end(); ++it) {
            if ((*it)->info.name == impl_name) {
                removed = *it;
                s->entries_.erase(it);
                stale = std::move(s->cached_);
                changed(*s);
                return true;
            }
        }
        return false;
    }

    /// Takes one registration out of every candidate list for the rest of its life. True only
    /// for the call that disabled it, so the caller warns exactly once.
    bool disable(Slot &s, const Entry &entry, std::string failure) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (entry.disabled_.exchange(true, std::memory_order_acq_rel))
            return false;
        entry.failure_ = std::move(failure);
        changed(s);
        return true;
    }

    /// Why an entry was disabled ("" while it is enabled).
    std::string failure(const Entry &entry) const {
        std::lock_guard<std::mutex> lock(mutex_);
        return entry.failure_;
    }

    /// Drops every cached candidate list, so the next call of each slot re-admits its
    /// implementations (the bindings re-run environment predicates then).
    void clear() {
        std::lock_guard<std::mutex> lock(mutex_);
        ++epoch_;
    }

    /// Every registered implementation of a slot, in registration order (disabled ones included).
    std::vector<EntryPtr> entries(const Slot &s) const {
        std::lock_guard<std::mutex> lock(mutex_);
        return s.entries_;
    }

    /// The current selection; re-reads the override variables.
    Selection selection() {
        std::lock_guard<std::mutex> lock(mutex_);
        refresh_environment();
        return env_.selection();
    }

    /// The candidate list for a call, newest first, reference last. Cheap when nothing changed:
    /// one lock, two getenv reads, one shared_ptr copy. Otherwise it is rebuilt from the
    /// enabled implementations the selection admits and for which `admit(entry)` holds (never
    /// asked of the reference, the fallback that runs everywhere). `admit` runs without the
    /// lock, so it may call back into the registry; a list built while something changed is
    /// used for this call but not cached. `fresh` rebuilds even when the cache is valid.
    template <class Admit>
    std::shared_ptr<const Candidates> candidates(Slot &s, Admit &&admit, bool fresh = false) {
        std::shared_ptr<const Candidates> replaced;  // released after the lock, like remove()'s
        std::unique_lock<std::mutex> lock(mutex_);
        refresh_environment();
        if (!fresh && s.cached_ && s.cached_generation_ == s.generation_ &&
            s.cached_epoch_ == epoch_)
            return s.cached_;
        const std::uint64_t generation = s.generation_, epoch = epoch_;
        const Selection sel = env_.selection();
        Candidates admitted;
        EntryPtr reference;
        for (auto it = s.entries_.rbegin(); it != s.entries_.rend(); ++it) {
            const Entry &e = **it;
            if (!sel.admits(e.info) || e.disabled())
                continue;
            if (e.info.is_reference())
                reference = *it;
            else
                admitted.push_back(*it);
        }
        lock.unlock();
        auto list = std::make_shared<Candidates>();
        for (EntryPtr &e : admitted)
            if (admit(*e))
                list->push_back(std::move(e));
        if (reference)
            list->push_back(std::move(reference));
        lock.lock();
        if (s.generation_ == generation && epoch_ == epoch) {
            replaced = std::exchange(s.cached_, list);
            s.cached_generation_ = generation;
            s.cached_epoch_ = epoch;
        }
        return list;
    }

    std::shared_ptr<const Candidates> candidates(Slot &s) {
        return candidates(s, [](const Entry &) { return true; });
    }

private:
    void changed(Slot &s) { ++s.generation_; }
    void refresh_environment() {
        if (env_.refresh())
            ++epoch_;
    }

    mutable std::mutex mutex_;
    std::map<std::string, SlotPtr> slots_;
    EnvironmentWatch env_;
    std::uint64_t epoch_ = 0;  // bumped by override-variable changes and clear()
};

}  // namespace turbo_physai
