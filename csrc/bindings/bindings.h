// csrc/bindings/bindings.h: one registration function per binding file, called by module.cpp.
#pragma once

#include <nanobind/nanobind.h>

namespace turbo_physai::bindings {

namespace nb = nanobind;

void bind_planner(nb::module_ &m);
void bind_journal(nb::module_ &m);
void bind_dispatcher(nb::module_ &m);
void bind_switch(nb::module_ &m);
void bind_kernel_registry(nb::module_ &m);
void bind_fake_quant_fp8(nb::module_ &m);
void bind_fake_quant_int8(nb::module_ &m);
void bind_fake_quant_int_grouped(nb::module_ &m);
void bind_fake_quant_fp4(nb::module_ &m);
void bind_ms_deform_attn(nb::module_ &m);
void bind_linear_sum_assignment(nb::module_ &m);

/// A group's transition switch (switch.cpp), the condition of its gates.
struct Switch;
/// The Switch `obj` is, or nullptr.
const Switch *as_switch(PyObject *obj);
/// Where a gate sends a call on the current thread: 1 new side, 0 old, -1 with an exception set.
int switch_routes_new(const Switch &s);

}  // namespace turbo_physai::bindings
