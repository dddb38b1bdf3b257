// csrc/bindings/switch.cpp: the transition switch of a group, read by its gates (Dispatchers).
//
// While a group is installed or rolled back, its function locations hold Dispatchers whose
// condition is a Switch: a call goes to the side the calling thread is already on (its outermost
// frame running one of the group's codes), else to the transition's target. Frames are read with
// the GIL held, so the answer is that of one instant; nothing here runs Python code.
#include <cstdint>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "turbo_physai/call_sides.h"

namespace turbo_physai::bindings {

struct Switch {
    CallSides<std::uintptr_t> sides;
    Side target;
    nb::list codes;  // holds the code objects, so that their addresses stay theirs
    std::string name;
};

namespace {

std::vector<std::uintptr_t> code_ids(const nb::list &codes, nb::list &held, const char *role) {
    std::vector<std::uintptr_t> ids;
    for (nb::handle code : codes) {
        if (!PyCode_Check(code.ptr()))
            throw nb::type_error(("Switch " + std::string(role) + " codes must be code objects, got " +
                                  Py_TYPE(code.ptr())->tp_name)
                                     .c_str());
        ids.push_back(reinterpret_cast<std::uintptr_t>(code.ptr()));
        held.append(code);
    }
    return ids;
}

// Side of the outermost frame of `ts` that runs one of the group's codes; -1 with an exception
// set when a frame object could not be made.
int outermost(const Switch &s, PyThreadState *ts, Side &side) {
    side = s.sides.outermost([ts](auto &&visit) {
        PyFrameObject *frame = PyThreadState_GetFrame(ts);
        while (frame) {
            PyCodeObject *code = PyFrame_GetCode(frame);
            visit(reinterpret_cast<std::uintptr_t>(code));
            Py_DECREF(code);
            PyFrameObject *back = PyFrame_GetBack(frame);
            Py_DECREF(frame);
            frame = back;
        }
    });
    return PyErr_Occurred() ? -1 : 0;
}

// Threads other than the caller whose call in flight started on the side being left.
int holding_back(const Switch &s) {
    PyThreadState *me = PyThreadState_Get();
    int count = 0;
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(PyThreadState_GetInterpreter(me)); ts;
         ts = PyThreadState_Next(ts)) {
        if (ts == me)
            continue;
        Side side;
        if (outermost(s, ts, side) < 0)
            throw nb::python_error();
        count += CallSides<std::uintptr_t>::holds_back(side, s.target);
    }
    return count;
}

}  // namespace

const Switch *as_switch(PyObject *obj) {
    nb::handle h(obj);
    return nb::isinstance<Switch>(h) ? nb::inst_ptr<Switch>(h) : nullptr;
}

int switch_routes_new(const Switch &s) {
    Side side;
    if (outermost(s, PyThreadState_Get(), side) < 0)
        return -1;
    return CallSides<std::uintptr_t>::routes_new(side, s.target) ? 1 : 0;
}

void bind_switch(nb::module_ &m) {
    nb::class_<Switch>(m, "Switch",
                       "The transition of one group: a Dispatcher given a Switch as condition "
                       "routes each call to the side its thread is on, else to the target.")
        .def(
            "__init__",
            [](Switch *self, const nb::list &old_codes, const nb::list &new_codes, bool target_new,
               std::string name) {
                nb::list held;
                auto old_ids = code_ids(old_codes, held, "old");
                auto new_ids = code_ids(new_codes, held, "new");
                new (self) Switch{CallSides<std::uintptr_t>(std::move(old_ids), std::move(new_ids)),
                                  target_new ? Side::new_side : Side::old_side, held,
                                  std::move(name)};
            },
            nb::arg("old_codes"), nb::arg("new_codes"), nb::arg("target_new"), nb::arg("name"))
        .def_prop_ro("target_new", [](const Switch &s) { return s.target == Side::new_side; })
        .def_ro("name", &Switch::name)
        .def(
            "routes_new",
            [](const Switch &s) {
                int r = switch_routes_new(s);
                if (r < 0)
                    throw nb::python_error();
                return r == 1;
            },
            "Where a gate would send a call made now on this thread.")
        .def("holding_back", &holding_back,
             "How many other threads are inside a call that started on the side being left.")
        .def("__repr__", [](const Switch &s) {
            return "<turbo_physai Switch " + s.name + " -> " +
                   (s.target == Side::new_side ? "new" : "old") + ">";
        });
}

}  // namespace turbo_physai::bindings
