// csrc/bindings/ms_deform_attn.cpp: nb::ndarray front of the MSDA CPU kernel; checks, then strides.
//
// Arrays arrive through DLPack (torch tensors, numpy arrays) and are never copied or converted
// here: a wrong dtype, device or shape is an error that names the array, the expected and the
// actual value. This is the memory-safety boundary of the kernel, so it checks everything the
// kernel relies on, including the data-dependent level checks a fake tensor cannot do.
#include <nanobind/ndarray.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "ms_deform_attn/ms_deform_attn.h"

namespace turbo_physai::bindings {
namespace {

namespace msda = kernels::msda;
using Input = nb::ndarray<nb::ro>;
using Output = nb::ndarray<>;

std::string dtype_name(nb::dlpack::dtype t) {
    using Code = nb::dlpack::dtype_code;
    const char *kind = "other";
    switch (static_cast<Code>(t.code)) {
    case Code::Int: kind = "int"; break;
    case Code::UInt: kind = "uint"; break;
    case Code::Float: kind = "float"; break;
    case Code::Bfloat: kind = "bfloat"; break;
    case Code::Bool: return "bool";
    default: break;
    }
    return kind + std::to_string(t.bits);
}

std::string shape_text(const std::vector<std::int64_t> &shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

template <typename Array>
std::vector<std::int64_t> shape_of(const Array &a) {
    std::vector<std::int64_t> s(a.ndim());
    for (std::size_t i = 0; i < a.ndim(); ++i)
        s[i] = static_cast<std::int64_t>(a.shape(i));
    return s;
}

template <typename Array>
void expect_rank(const Array &a, const char *name, std::size_t rank, const char *layout) {
    if (a.ndim() != rank)
        throw nb::value_error((std::string(name) + ": expected a " + std::to_string(rank) +
                               "-d tensor " + layout + ", got shape " + shape_text(shape_of(a)))
                                  .c_str());
}

template <typename Array>
void expect_shape(const Array &a, const char *name, const std::vector<std::int64_t> &expected) {
    if (shape_of(a) != expected)
        throw nb::value_error((std::string(name) + ": expected shape " + shape_text(expected) +
                               ", got " + shape_text(shape_of(a)))
                                  .c_str());
}

template <typename Array>
void expect_dtype_and_cpu(const Array &a, const char *name, nb::dlpack::dtype expected,
                          const char *why) {
    if (a.dtype() != expected)
        throw nb::type_error((std::string(name) + ": expected dtype " + dtype_name(expected) + why +
                              ", got " + dtype_name(a.dtype()))
                                 .c_str());
    if (a.device_type() != nb::device::cpu::value)
        throw nb::value_error((std::string(name) + ": expected a CPU tensor, got DLPack device " +
                               std::to_string(a.device_type()))
                                  .c_str());
}

template <typename T, int Rank, typename Array>
msda::Strided<T, Rank> strided(const Array &a) {
    msda::Strided<T, Rank> s{static_cast<T *>(const_cast<void *>(a.data())), {}};
    for (int i = 0; i < Rank; ++i)
        s.stride[i] = a.stride(static_cast<std::size_t>(i));
    return s;
}

/// Everything the kernel needs from the five inputs, once they have been checked.
struct Checked {
    msda::Problem problem;
    nb::dlpack::dtype dtype;
    std::vector<std::int64_t> value_shape, loc_shape, attn_shape, out_shape;
};

Checked check_inputs(const Input &value, const Input &shapes, const Input &starts,
                     const Input &loc, const Input &attn) {
    expect_rank(value, "value", 4, "(N, S, M, D)");
    expect_rank(shapes, "spatial_shapes", 2, "(L, 2)");
    expect_rank(starts, "level_start_index", 1, "(L,)");
    expect_rank(loc, "sampling_locations", 6, "(N, Lq, M, L, P, 2)");
    expect_rank(attn, "attention_weights", 5, "(N, Lq, M, L, P)");
    const nb::dlpack::dtype dt = value.dtype();
    if (dt != nb::dtype<float>() && dt != nb::dtype<double>())
        throw nb::type_error(("value: expected dtype float32 or float64, got " + dtype_name(dt))
                                 .c_str());
    expect_dtype_and_cpu(value, "value", dt, "");
    expect_dtype_and_cpu(loc, "sampling_locations", dt, " (the dtype of value)");
    expect_dtype_and_cpu(attn, "attention_weights", dt, " (the dtype of value)");
    expect_dtype_and_cpu(shapes, "spatial_shapes", nb::dtype<std::int64_t>(), "");
    expect_dtype_and_cpu(starts, "level_start_index", nb::dtype<std::int64_t>(), "");

    const auto v = shape_of(value), l = shape_of(loc);
    const std::int64_t L = static_cast<std::int64_t>(shapes.shape(0));
    expect_shape(shapes, "spatial_shapes", {L, 2});
    expect_shape(starts, "level_start_index", {L});
    expect_shape(loc, "sampling_locations", {v[0], l[1], v[2], L, l[4], 2});
    expect_shape(attn, "attention_weights", {v[0], l[1], v[2], L, l[4]});

    auto levels = msda::make_levels(static_cast<const std::int64_t *>(shapes.data()),
                                    {shapes.stride(0), shapes.stride(1)},
                                    static_cast<const std::int64_t *>(starts.data()),
                                    starts.stride(0), L, v[1]);
    return {{v[0], v[1], v[2], v[3], l[1], l[4], std::move(levels)},
            dt, v, l, shape_of(attn), {v[0], l[1], v[2], v[3]}};
}

template <typename T>
msda::Inputs<T> inputs_of(const Input &value, const Input &loc, const Input &attn) {
    return {strided<const T, 4>(value), strided<const T, 6>(loc), strided<const T, 5>(attn)};
}

void forward(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
             const Input &attn, const Output &out, int max_threads) {
    const Checked c = check_inputs(value, shapes, starts, loc, attn);
    expect_rank(out, "output", 4, "(N, Lq, M, D)");
    expect_shape(out, "output", c.out_shape);
    expect_dtype_and_cpu(out, "output", c.dtype, " (the dtype of value)");
    nb::gil_scoped_release release;
    if (c.dtype == nb::dtype<float>())
        msda::forward<float>(c.problem, inputs_of<float>(value, loc, attn),
                             strided<float, 4>(out), max_threads);
    else
        msda::forward<double>(c.problem, inputs_of<double>(value, loc, attn),
                              strided<double, 4>(out), max_threads);
}

void backward(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
              const Input &attn, const Input &grad_out, const Output &grad_value,
              const Output &grad_loc, const Output &grad_attn, int max_threads) {
    const Checked c = check_inputs(value, shapes, starts, loc, attn);
    expect_rank(grad_out, "grad_output", 4, "(N, Lq, M, D)");
    expect_shape(grad_out, "grad_output", c.out_shape);
    expect_dtype_and_cpu(grad_out, "grad_output", c.dtype, " (the dtype of value)");
    const std::pair<const Output *, const char *> grads[] = {
        {&grad_value, "grad_value"}, {&grad_loc, "grad_sampling_locations"},
        {&grad_attn, "grad_attention_weights"}};
    const std::vector<std::int64_t> *wanted[] = {&c.value_shape, &c.loc_shape, &c.attn_shape};
    for (int i = 0; i < 3; ++i) {
        expect_shape(*grads[i].first, grads[i].second, *wanted[i]);
        expect_dtype_and_cpu(*grads[i].first, grads[i].second, c.dtype, " (the dtype of value)");
    }
    nb::gil_scoped_release release;
    const auto run = [&](auto zero) {
        using T = decltype(zero);
        msda::backward<T>(c.problem, inputs_of<T>(value, loc, attn), strided<const T, 4>(grad_out),
                          {strided<T, 4>(grad_value), strided<T, 6>(grad_loc),
                           strided<T, 5>(grad_attn)},
                          max_threads);
    };
    if (c.dtype == nb::dtype<float>())
        run(0.0f);
    else
        run(0.0);
}

}  // namespace

void bind_ms_deform_attn(nb::module_ &m) {
    m.def("ms_deform_attn_forward", &forward, nb::arg("value"), nb::arg("spatial_shapes"),
          nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("output"), nb::arg("max_threads") = 0,
          "Write MSDA of float32/float64 CPU arrays into output (N, Lq, M, D); all of it is "
          "written. Channel dimensions must have stride 1; other strides are free.");
    m.def("ms_deform_attn_backward", &backward, nb::arg("value"), nb::arg("spatial_shapes"),
          nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("grad_output"), nb::arg("grad_value"),
          nb::arg("grad_sampling_locations"), nb::arg("grad_attention_weights"),
          nb::arg("max_threads") = 0,
          "Overwrite the three gradient arrays from grad_output (N, Lq, M, D); deterministic.");
}

}  // namespace turbo_physai::bindings
