// csrc/bindings/journal.cpp: the patch journal over Python objects (attributes and dict items).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "turbo_physai/journal.h"

namespace turbo_physai::bindings {
namespace {

/// A dict owner (sys.modules, a registry's module_dict) is patched by item; any other owner by
/// attribute, read from its own `__dict__` so that descriptors come back raw and inherited
/// attributes read as absent (wrapt's rule: never getattr).
struct PyStore {
    using Ref = nb::object;
    using Owner = nb::object;

    std::optional<Ref> read(const Owner &owner, const std::string &name) const {
        nb::object mapping = PyDict_Check(owner.ptr()) ? owner : nb::getattr(owner, "__dict__");
        PyObject *value = PyMapping_GetOptionalItemString_compat(mapping.ptr(), name.c_str());
        if (!value)
            return std::nullopt;
        return nb::steal(value);
    }
    void write(const Owner &owner, const std::string &name, const Ref &value) const {
        if (PyDict_Check(owner.ptr()))
            nb::cast<nb::dict>(owner)[name.c_str()] = value;
        else
            nb::setattr(owner, name.c_str(), value);
    }
    void erase(const Owner &owner, const std::string &name) const {
        if (PyDict_Check(owner.ptr()))
            nb::cast<nb::dict>(owner).attr("pop")(name.c_str(), nb::none());
        else
            nb::delattr(owner, name.c_str());
    }
    static bool same(const Ref &a, const Ref &b) { return a.is(b); }

private:
    // New reference or nullptr when absent; other lookup errors propagate as python_error.
    static PyObject *PyMapping_GetOptionalItemString_compat(PyObject *mapping, const char *key) {
        PyObject *value = PyMapping_GetItemString(mapping, key);
        if (!value) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError))
                throw nb::python_error();
            PyErr_Clear();
        }
        return value;
    }
};

using PyJournal = Journal<PyStore>;

/// Keeps the cyclic GC from running for a scope: a collection can run finalizers, Python code
/// at which the interpreter may hand the GIL to another thread in the middle of a batch of
/// writes that other threads must see all at once.
class GcPause {
public:
    GcPause() : was_enabled_(PyGC_Disable()) {}
    ~GcPause() {
        if (was_enabled_)
            PyGC_Enable();
    }
    GcPause(const GcPause &) = delete;
    GcPause &operator=(const GcPause &) = delete;

private:
    int was_enabled_;
};

nb::dict report_to_dict(const RestoreReport &r) {
    nb::dict out;
    out["restored"] = r.restored;
    out["drifted"] = r.drifted;
    out["failed"] = r.failed;
    return out;
}

}  // namespace

void bind_journal(nb::module_ &m) {
    nb::class_<PyJournal>(m, "Journal",
                          "Snapshot -> install -> exact reverse-order restore of Python objects.")
        .def(nb::init<>())
        .def("snapshot", &PyJournal::snapshot, nb::arg("owner"), nb::arg("name"),
             nb::arg("label"), nb::arg("group"),
             "Record the raw current value of owner.__dict__[name] (or dict item); return the entry.")
        .def("install", &PyJournal::install, nb::arg("entry"), nb::arg("value"))
        .def(
            "install_many",
            [](PyJournal &j, const std::vector<std::size_t> &entries,
               const std::vector<nb::object> &values) {
                if (entries.size() != values.size())
                    throw nb::value_error("install_many: as many values as entries are needed");
                GcPause pause;
                for (std::size_t i = 0; i < entries.size(); ++i)
                    j.install(entries[i], values[i]);
            },
            nb::arg("entries"), nb::arg("values"),
            "Install each value at its entry in one native step: no Python code runs between the "
            "writes (unless an owner's __setattr__ is Python code), so other threads see all of "
            "them or none. On an error, the writes made so far stay recorded for restore.")
        .def(
            "peek",
            [](const PyJournal &j, std::size_t entry) {
                if (entry >= j.entries().size())
                    throw nb::index_error(("no journal entry " + std::to_string(entry)).c_str());
                const auto &e = j.entries()[entry];
                nb::dict out;
                out["owner"] = e.owner;
                if (e.original)
                    out["original"] = *e.original;
                if (e.installed)
                    out["installed"] = *e.installed;
                if (auto current = j.store().read(e.owner, e.name))
                    out["current"] = *current;
                return out;
            },
            nb::arg("entry"),
            "An entry's 'owner' and raw values: 'original', 'installed', 'current' (absent: "
            "none).")
        .def(
            "restore_group",
            [](PyJournal &j, const std::string &group) {
                GcPause pause;
                return report_to_dict(j.restore_group(group));
            },
            nb::arg("group"))
        .def("restore_all", [](PyJournal &j) {
            GcPause pause;  // one native pass: other threads see every group restored at once
            return report_to_dict(j.restore_all());
        })
        .def("compact", &PyJournal::compact)
        .def_prop_ro("active", &PyJournal::active)
        .def("entries", [](const PyJournal &j) {
            nb::list out;
            for (const auto &e : j.entries()) {
                nb::dict d;
                d["label"] = e.label;
                d["group"] = e.group;
                d["name"] = e.name;
                d["existed"] = e.original.has_value();
                d["installed"] = e.installed.has_value();
                d["open"] = e.open;
                out.append(d);
            }
            return out;
        });
}

}  // namespace turbo_physai::bindings
