// csrc/core/include/turbo_physai/journal.h: the patch journal, snapshot -> install -> exact restore.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace turbo_physai {

/// What one restore pass did, entry labels in the order they were handled (newest first).
struct RestoreReport {
    std::vector<std::string> restored;
    /// Someone else installed a different object on top of ours: left in place, not clobbered.
    std::vector<std::string> drifted;
    /// The owner refused the write, or reading back did not give the original object.
    std::vector<std::pair<std::string, std::string>> failed;
};

/// Records every write the engine makes so it can be undone exactly, in reverse order.
///
/// `Store` abstracts the object model (Python attributes and dicts in the bindings, plain maps in
/// the tests). It provides `Ref` (a handle with identity), `Owner`,
/// `std::optional<Ref> read(const Owner&, const std::string&)` (the raw stored value, never a
/// bound or inherited one), `write`, `erase` and `static bool same(const Ref&, const Ref&)`.
/// Store operations may throw; the journal stays consistent when they do.
template <class Store>
class Journal {
public:
    using Ref = typename Store::Ref;
    using Owner = typename Store::Owner;

    struct Entry {
        Owner owner;
        std::string name;
        std::string label;  ///< user-facing path, e.g. "pkg.mod.Class.method"
        std::string group;
        std::optional<Ref> original;   ///< empty: the name did not exist before
        std::optional<Ref> installed;  ///< empty: not (yet) installed, nothing to undo
        bool open = true;              ///< false once restored or abandoned
    };

    explicit Journal(Store store = Store()) : store_(std::move(store)) {}

    /// Reads the current raw value. Call for every write of a group before installing any.
    std::size_t snapshot(Owner owner, std::string name, std::string label, std::string group) {
        std::optional<Ref> original = store_.read(owner, name);
        entries_.push_back(Entry{std::move(owner), std::move(name), std::move(label),
                                 std::move(group), std::move(original), std::nullopt, true});
        return entries_.size() - 1;
    }

    /// Writes `value` at a snapshotted location. If the store throws, nothing is recorded.
    void install(std::size_t entry, const Ref &value) {
        Entry &e = at(entry);
        if (!e.open)
            throw std::logic_error("journal entry '" + e.label + "' is already closed");
        store_.write(e.owner, e.name, value);
        e.installed = value;
    }

    /// Restores the open entries of `group` in reverse order.
    RestoreReport restore_group(const std::string &group) { return restore(&group); }

    /// Restores every open entry in reverse order.
    RestoreReport restore_all() { return restore(nullptr); }

    /// True while any entry still has something installed.
    bool active() const {
        for (const auto &e : entries_)
            if (e.open && e.installed)
                return true;
        return false;
    }

    const std::vector<Entry> &entries() const { return entries_; }
    const Store &store() const { return store_; }

    /// Forgets closed entries so that a long-lived journal does not grow without bound.
    void compact() {
        std::vector<Entry> kept;
        for (auto &e : entries_)
            if (e.open)
                kept.push_back(std::move(e));
        entries_ = std::move(kept);
    }

private:
    Entry &at(std::size_t entry) {
        if (entry >= entries_.size())
            throw std::out_of_range("no journal entry " + std::to_string(entry));
        return entries_[entry];
    }

    RestoreReport restore(const std::string *group) {
        RestoreReport report;
        for (std::size_t i = entries_.size(); i-- > 0;) {
            Entry &e = entries_[i];
            if (!e.open || (group && e.group != *group))
                continue;
            e.open = false;
            if (!e.installed)
                continue;  // snapshotted but never written: the original is untouched
            try {
                std::optional<Ref> current = store_.read(e.owner, e.name);
                if (!current || !Store::same(*current, *e.installed)) {
                    report.drifted.push_back(e.label);
                    continue;
                }
                if (e.original)
                    store_.write(e.owner, e.name, *e.original);
                else
                    store_.erase(e.owner, e.name);
                std::optional<Ref> after = store_.read(e.owner, e.name);
                bool exact = e.original ? (after && Store::same(*after, *e.original)) : !after;
                if (exact)
                    report.restored.push_back(e.label);
                else
                    report.failed.emplace_back(e.label, "identity check after restore failed");
            } catch (const std::exception &err) {
                report.failed.emplace_back(e.label, err.what());
            }
        }
        return report;
    }

    Store store_;
    std::vector<Entry> entries_;
};

}  // namespace turbo_physai
