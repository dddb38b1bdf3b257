// csrc/bindings/msda_checks.cpp: input checks and messages of the ms_deform_attn fronts.
#include "msda_checks.h"

#include <utility>

namespace turbo_physai::bindings::msda_checks {
namespace {

using Code = nb::dlpack::dtype_code;

constexpr nb::dlpack::dtype kHalf{static_cast<std::uint8_t>(Code::Float), 16, 1};
constexpr nb::dlpack::dtype kBfloat16{static_cast<std::uint8_t>(Code::Bfloat), 16, 1};

// torch's names for DLPack devices ("cpu", "cuda:0"), as torch.device prints them.
std::string device_name(int type, int id) {
    switch (type) {
    case nb::device::cpu::value: return "cpu";
    case nb::device::cuda::value:
    case nb::device::rocm::value: return "cuda:" + std::to_string(id);  // torch's name for HIP too
    default: return "DLPack device " + std::to_string(type) + ":" + std::to_string(id);
    }
}

template <typename Array>
std::string device_of(const Array &a) {
    return device_name(a.device_type(), a.device_id());
}

template <typename Array>
void expect_rank(const Array &a, const char *name, std::size_t rank, const char *layout) {
    if (a.ndim() != rank)
        throw nb::value_error((std::string(name) + ": expected a " + std::to_string(rank) +
                               "-d tensor " + layout + ", got shape " + shape_text(shape_of(a)))
                                  .c_str());
}

template <typename Array>
void expect_shape(const Array &a, const char *name, const std::vector<std::int64_t> &expected,
                  const char *source) {
    if (shape_of(a) != expected)
        throw nb::value_error((std::string(name) + ": expected shape " + shape_text(expected) +
                               " (" + source + "), got " + shape_text(shape_of(a)))
                                  .c_str());
}

template <typename Array>
void expect_dtype(const Array &a, const char *name, nb::dlpack::dtype expected,
                  const char *why = "the dtype of value") {
    if (a.dtype() != expected)
        throw nb::type_error((std::string(name) + ": expected dtype " + dtype_name(expected) +
                              " (" + why + "), got " + dtype_name(a.dtype()))
                                 .c_str());
}

// The kernels read int64 level metadata; the Python front converts other integer dtypes.
void expect_index(const Input &a, const char *name) {
    if (a.dtype() != nb::dtype<std::int64_t>())
        throw nb::type_error((std::string(name) + ": expected an integer dtype (int64), got " +
                              dtype_name(a.dtype()))
                                 .c_str());
}

template <typename Array>
void expect_device(const Array &a, const char *name, const Input &value) {
    if (a.device_type() != value.device_type() || a.device_id() != value.device_id())
        throw nb::value_error((std::string(name) + ": expected device " + device_of(value) +
                               " (the device of value), got " + device_of(a))
                                  .c_str());
}

void expect_value_dtype_and_device(const Input &value, Target target) {
    const nb::dlpack::dtype dt = value.dtype();
    const bool cpu = target == Target::cpu;
    const bool accepted = cpu ? dt == nb::dtype<float>() || dt == nb::dtype<double>()
                              : dt == nb::dtype<float>() || dt == kHalf || dt == kBfloat16;
    if (!accepted)
        throw nb::type_error(
            (std::string("value: expected dtype ") +
             (cpu ? "torch.float32 or torch.float64 (torch.float16 and torch.bfloat16 are "
                    "computed in torch.float32 by turbo_physai.ops)"
                  : "torch.float32, torch.float16 or torch.bfloat16 on CUDA") +
             ", got " + dtype_name(dt))
                .c_str());
    const int device = cpu ? nb::device::cpu::value : nb::device::cuda::value;
    if (value.device_type() != device)
        throw nb::value_error((std::string("value: expected a ") + (cpu ? "CPU" : "CUDA") +
                               " tensor, got " + device_of(value))
                                  .c_str());
}

// Locations and weights share a dtype: value's, or float32 with a 16-bit value (mixed precision).
void expect_point_dtypes(const Input &value, const Input &loc, const Input &attn) {
    const nb::dlpack::dtype dt = value.dtype();
    const bool half = dt == kHalf || dt == kBfloat16;
    if (loc.dtype() != dt && !(half && loc.dtype() == nb::dtype<float>()))
        throw nb::type_error((std::string("sampling_locations: expected dtype ") +
                              dtype_name(dt) + " (the dtype of value)" +
                              (half ? " or torch.float32 (mixed precision)" : "") + ", got " +
                              dtype_name(loc.dtype()))
                                 .c_str());
    expect_dtype(attn, "attention_weights", loc.dtype(), "the dtype of sampling_locations");
}

}  // namespace

std::string dtype_name(nb::dlpack::dtype t) {
    const char *kind = "other";
    switch (static_cast<Code>(t.code)) {
    case Code::Int: kind = "int"; break;
    case Code::UInt: kind = "uint"; break;
    case Code::Float: kind = "float"; break;
    case Code::Bfloat: kind = "bfloat"; break;
    case Code::Complex: kind = "complex"; break;
    case Code::Bool: return "torch.bool";
    default: break;
    }
    return std::string("torch.") + kind + std::to_string(t.bits);
}

template <typename Array>
std::vector<std::int64_t> shape_of(const Array &a) {
    std::vector<std::int64_t> s(a.ndim());
    for (std::size_t i = 0; i < a.ndim(); ++i)
        s[i] = static_cast<std::int64_t>(a.shape(i));
    return s;
}

std::string shape_text(const std::vector<std::int64_t> &shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

Shapes check_inputs(const Input &value, const Input &shapes, const Input &starts,
                    const Input &loc, const Input &attn, Target target) {
    expect_rank(value, "value", 4, "(N, S, M, D)");
    expect_rank(shapes, "spatial_shapes", 2, "(L, 2)");
    expect_rank(starts, "level_start_index", 1, "(L,)");
    expect_rank(loc, "sampling_locations", 6, "(N, Lq, M, L, P, 2)");
    expect_rank(attn, "attention_weights", 5, "(N, Lq, M, L, P)");
    expect_value_dtype_and_device(value, target);
    expect_point_dtypes(value, loc, attn);
    expect_index(shapes, "spatial_shapes");
    expect_index(starts, "level_start_index");
    expect_device(shapes, "spatial_shapes", value);
    expect_device(starts, "level_start_index", value);
    expect_device(loc, "sampling_locations", value);
    expect_device(attn, "attention_weights", value);
    const auto v = shape_of(value), l = shape_of(loc);
    const std::int64_t L = static_cast<std::int64_t>(shapes.shape(0));
    expect_shape(shapes, "spatial_shapes", {L, 2}, "L rows of (H, W)");
    expect_shape(starts, "level_start_index", {L}, "L of spatial_shapes");
    expect_shape(loc, "sampling_locations", {v[0], l[1], v[2], L, l[4], 2},
                 "N, M of value, L of spatial_shapes");
    expect_shape(attn, "attention_weights", {v[0], l[1], v[2], L, l[4]},
                 "N, M of value, Lq, L, P of sampling_locations");
    // turbo_physai.kernels.reference.MSDA_MAX_POINTS: the CPU forward keeps a row's points at hand.
    constexpr std::int64_t kMaxPoints = std::int64_t{1} << 16;
    if (L > kMaxPoints || (L > 0 && l[4] > kMaxPoints / L))
        throw nb::value_error(("sampling_locations: expected at most " +
                               std::to_string(kMaxPoints) +
                               " sampling points per query and head (L*P), got L = " +
                               std::to_string(L) + ", P = " + std::to_string(l[4]))
                                  .c_str());
    return {v, l, shape_of(attn), L, loc.dtype()};
}

template <typename Array>
void expect_array(const Array &a, const char *name, const std::vector<std::int64_t> &shape,
                  const char *shape_source, nb::dlpack::dtype dtype, const char *dtype_source,
                  const Input &value) {
    expect_shape(a, name, shape, shape_source);
    expect_dtype(a, name, dtype, dtype_source);
    expect_device(a, name, value);
}

template <typename Array>
std::array<std::int64_t, 4> heads_strides(const Array &a, const char *name, const Shapes &s,
                                          const Input &value) {
    const std::int64_t n = s.value[0], lq = s.loc[1], m = s.value[2], d = s.value[3];
    // A 4-d array is held to (N, Lq, M, D); anything else to the op's layout, with its message.
    const bool split = a.ndim() == 4;
    expect_shape(a, name,
                 split ? std::vector<std::int64_t>{n, lq, m, d}
                       : std::vector<std::int64_t>{n, lq, m * d},
                 split ? "N, Lq, M, D" : "N, Lq, M*D");
    expect_dtype(a, name, s.points, "the dtype of sampling_locations");
    expect_device(a, name, value);
    if (split)
        return {a.stride(0), a.stride(1), a.stride(2), a.stride(3)};
    return {a.stride(0), a.stride(1), d * a.stride(2), a.stride(2)};
}

template std::vector<std::int64_t> shape_of(const Input &);
template std::vector<std::int64_t> shape_of(const Output &);
template void expect_array(const Input &, const char *, const std::vector<std::int64_t> &,
                           const char *, nb::dlpack::dtype, const char *, const Input &);
template void expect_array(const Output &, const char *, const std::vector<std::int64_t> &,
                           const char *, nb::dlpack::dtype, const char *, const Input &);
template std::array<std::int64_t, 4> heads_strides(const Input &, const char *, const Shapes &,
                                                   const Input &);
template std::array<std::int64_t, 4> heads_strides(const Output &, const char *, const Shapes &,
                                                   const Input &);

}  // namespace turbo_physai::bindings::msda_checks
