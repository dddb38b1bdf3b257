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
        .def("restore_group",
             [](PyJournal &j, const std::string &group) { return report_to_dict(j.restore_group(group)); },
             nb::arg("group"))
        .def("restore_all", [](PyJournal &j) { return report_to_dict(j.restore_all()); })
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
