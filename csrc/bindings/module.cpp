// csrc/bindings/module.cpp: entry point of turbo_physai._core; each binding file adds its part.
#include "bindings.h"

NB_MODULE(_core, m) {
    m.doc() = "Private compiled core of turbo_physai. Use the public Python API instead.";
    turbo_physai::bindings::bind_planner(m);
    turbo_physai::bindings::bind_journal(m);
    turbo_physai::bindings::bind_dispatcher(m);
    turbo_physai::bindings::bind_switch(m);
    turbo_physai::bindings::bind_kernel_registry(m);
    turbo_physai::bindings::bind_fake_quant_fp8(m);
    turbo_physai::bindings::bind_fake_quant_int8(m);
    turbo_physai::bindings::bind_fake_quant_int_grouped(m);
    turbo_physai::bindings::bind_fake_quant_fp4(m);
    turbo_physai::bindings::bind_ms_deform_attn(m);
    turbo_physai::bindings::bind_linear_sum_assignment(m);
}
