// csrc/bindings/msda_checks.h: the input checks of the ms_deform_attn fronts (CPU and CUDA).
//
// These checks are the op's eager input checks: turbo_physai.ops.ms_deform_attn's fast path runs
// no Python checks, so every message names the tensor, the expected and the actual value exactly
// as turbo_physai.kernels.reference.check_ms_deform_attn does (same wording, torch dtype and
// device names, same order of checks, so an input with several faults gets the same message on
// either path).
#pragma once

#include <nanobind/ndarray.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.h"

namespace turbo_physai::bindings::msda_checks {

using Input = nb::ndarray<nb::ro>;
using Output = nb::ndarray<>;

/// "torch.float32", "torch.int64", ...: the names torch users see.
std::string dtype_name(nb::dlpack::dtype t);

/// Instantiated for Input and Output, as are the other templates here.
template <typename Array>
std::vector<std::int64_t> shape_of(const Array &a);
std::string shape_text(const std::vector<std::int64_t> &shape);

/// The kernel family a front serves: it fixes value's device type and the accepted dtypes.
enum class Target { cpu, cuda };

/// The sizes the five inputs agree on.
struct Shapes {
    std::vector<std::int64_t> value, loc, attn;
    std::int64_t levels;
    nb::dlpack::dtype points;  ///< of locations and weights, output and their gradients
};

/// Ranks, dtypes (value's accepted by `target`; locations and weights as value, or float32 with a
/// 16-bit value; int64 level metadata), devices (value's of `target`, the others on value's) and
/// shapes of the five inputs.
Shapes check_inputs(const Input &value, const Input &shapes, const Input &starts,
                    const Input &loc, const Input &attn, Target target);

/// `a` has `shape` and `dtype` and lies on value's device; the sources say in the message where
/// the expected shape and dtype come from ("the shape of value").
template <typename Array>
void expect_array(const Array &a, const char *name, const std::vector<std::int64_t> &shape,
                  const char *shape_source, nb::dlpack::dtype dtype, const char *dtype_source,
                  const Input &value);

/// The element strides of output or grad_output seen as (N, Lq, M, D). Both the op's own layout
/// (N, Lq, M*D), whose last dimension splits into heads and channels, and (N, Lq, M, D) are
/// accepted; the dtype must be the locations', the device value's.
template <typename Array>
std::array<std::int64_t, 4> heads_strides(const Array &a, const char *name,
                                          const Shapes &s, const Input &value);

}  // namespace turbo_physai::bindings::msda_checks
