// csrc/bindings/kernel_requirements.h: `requires=` of kernels.register, plain data <-> Requirements.
#pragma once

#include <string>

#include "bindings.h"
#include "turbo_physai/kernel_registry.h"

namespace turbo_physai::bindings {

/// Validates a dict with keys device, dtype, contiguous, rank, graph_capture, args (see
/// docs/kernels.md). Errors name the slot, the implementation and the offending key.
Requirements parse_requirements(nb::handle spec, const std::string &slot, const std::string &impl);

/// The inverse, for kernels.implementations(): only the keys that constrain something.
nb::dict requirements_dict(const Requirements &req);

}  // namespace turbo_physai::bindings
