// csrc/bindings/planner.cpp: exposes plan_groups to the engine as plain Python data in and out.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "turbo_physai/planner.h"

namespace turbo_physai::bindings {

void bind_planner(nb::module_ &m) {
    nb::exception<PlanError>(m, "PlanError", PyExc_ValueError);

    nb::class_<GroupNode>(m, "GroupNode")
        .def(nb::init<std::string, bool, std::vector<std::string>, std::vector<std::string>>(),
             nb::arg("id"), nb::arg("import_compat"), nb::arg("depends_on"), nb::arg("writes"))
        .def_ro("id", &GroupNode::id)
        .def_ro("import_compat", &GroupNode::import_compat)
        .def_ro("depends_on", &GroupNode::depends_on)
        .def_ro("writes", &GroupNode::writes);

    nb::class_<Conflict>(m, "Conflict")
        .def_ro("path", &Conflict::path)
        .def_ro("first", &Conflict::first)
        .def_ro("second", &Conflict::second);

    nb::class_<Plan>(m, "Plan")
        .def_ro("order", &Plan::order)
        .def_ro("added", &Plan::added)
        .def_ro("conflicts", &Plan::conflicts);

    m.def("validate_catalog", &validate_catalog, nb::arg("catalog"),
          "Raise PlanError for duplicate/empty IDs, unknown dependencies, phase violations.");
    m.def("plan_groups", &plan_groups, nb::arg("catalog"), nb::arg("requested"),
          "Dependency closure, import-compat first, stable topological order, conflicts.");
}

}  // namespace turbo_physai::bindings
