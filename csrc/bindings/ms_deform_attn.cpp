// csrc/bindings/ms_deform_attn.cpp: nb::ndarray front of the MSDA CPU and CUDA kernels; checks first.
//
// Arrays arrive through DLPack (torch tensors, numpy arrays) and are never copied or converted
// here: a wrong dtype, device or shape is an error that names the array, the expected and the
// actual value. This is the memory-safety boundary of the kernel, so it checks everything the
// kernel relies on, including the data-dependent level checks a fake tensor cannot do.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "ms_deform_attn/ms_deform_attn.h"
#ifdef TPA_WITH_CUDA
#include "ms_deform_attn/ms_deform_attn_cuda.h"
#endif

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
void expect_dtype_and_device(const Array &a, const char *name, nb::dlpack::dtype expected,
                             const char *why, int device = nb::device::cpu::value) {
    if (a.dtype() != expected)
        throw nb::type_error((std::string(name) + ": expected dtype " + dtype_name(expected) + why +
                              ", got " + dtype_name(a.dtype()))
                                 .c_str());
    if (a.device_type() != device)
        throw nb::value_error((std::string(name) + ": expected a " +
                               (device == nb::device::cpu::value ? "CPU" : "CUDA") +
                               " tensor, got DLPack device " + std::to_string(a.device_type()))
                                  .c_str());
}

template <typename T, int Rank, typename Array>
msda::Strided<T, Rank> strided(const Array &a) {
    msda::Strided<T, Rank> s{static_cast<T *>(const_cast<void *>(a.data())), {}};
    for (int i = 0; i < Rank; ++i)
        s.stride[i] = a.stride(static_cast<std::size_t>(i));
    return s;
}

/// The five inputs' ranks and shapes agree (dtypes and devices are the caller's to check).
struct Shapes {
    std::vector<std::int64_t> value, loc, attn, out;
    std::int64_t levels;
};

Shapes check_shapes(const Input &value, const Input &shapes, const Input &starts,
                    const Input &loc, const Input &attn) {
    expect_rank(value, "value", 4, "(N, S, M, D)");
    expect_rank(shapes, "spatial_shapes", 2, "(L, 2)");
    expect_rank(starts, "level_start_index", 1, "(L,)");
    expect_rank(loc, "sampling_locations", 6, "(N, Lq, M, L, P, 2)");
    expect_rank(attn, "attention_weights", 5, "(N, Lq, M, L, P)");
    const auto v = shape_of(value), l = shape_of(loc);
    const std::int64_t L = static_cast<std::int64_t>(shapes.shape(0));
    expect_shape(shapes, "spatial_shapes", {L, 2});
    expect_shape(starts, "level_start_index", {L});
    expect_shape(loc, "sampling_locations", {v[0], l[1], v[2], L, l[4], 2});
    expect_shape(attn, "attention_weights", {v[0], l[1], v[2], L, l[4]});
    return {v, l, shape_of(attn), {v[0], l[1], v[2], v[3]}, L};
}

/// Everything the CPU kernel needs from the five inputs, once they have been checked.
struct Checked {
    msda::Problem problem;
    nb::dlpack::dtype dtype;
    Shapes shapes;
};

Checked check_inputs(const Input &value, const Input &shapes, const Input &starts,
                     const Input &loc, const Input &attn) {
    const nb::dlpack::dtype dt = value.dtype();
    if (dt != nb::dtype<float>() && dt != nb::dtype<double>())
        throw nb::type_error(("value: expected dtype float32 or float64, got " + dtype_name(dt))
                                 .c_str());
    Shapes s = check_shapes(value, shapes, starts, loc, attn);
    expect_dtype_and_device(value, "value", dt, "");
    expect_dtype_and_device(loc, "sampling_locations", dt, " (the dtype of value)");
    expect_dtype_and_device(attn, "attention_weights", dt, " (the dtype of value)");
    expect_dtype_and_device(shapes, "spatial_shapes", nb::dtype<std::int64_t>(), "");
    expect_dtype_and_device(starts, "level_start_index", nb::dtype<std::int64_t>(), "");
    auto levels = msda::make_levels(static_cast<const std::int64_t *>(shapes.data()),
                                    {shapes.stride(0), shapes.stride(1)},
                                    static_cast<const std::int64_t *>(starts.data()),
                                    starts.stride(0), s.levels, s.value[1]);
    const auto &v = s.value;
    return {{v[0], v[1], v[2], v[3], s.loc[1], s.loc[4], std::move(levels)}, dt, std::move(s)};
}

template <typename T>
msda::Inputs<T> inputs_of(const Input &value, const Input &loc, const Input &attn) {
    return {strided<const T, 4>(value), strided<const T, 6>(loc), strided<const T, 5>(attn)};
}

void forward(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
             const Input &attn, const Output &out, int max_threads) {
    const Checked c = check_inputs(value, shapes, starts, loc, attn);
    expect_rank(out, "output", 4, "(N, Lq, M, D)");
    expect_shape(out, "output", c.shapes.out);
    expect_dtype_and_device(out, "output", c.dtype, " (the dtype of value)");
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
    expect_shape(grad_out, "grad_output", c.shapes.out);
    expect_dtype_and_device(grad_out, "grad_output", c.dtype, " (the dtype of value)");
    const std::pair<const Output *, const char *> grads[] = {
        {&grad_value, "grad_value"}, {&grad_loc, "grad_sampling_locations"},
        {&grad_attn, "grad_attention_weights"}};
    const std::vector<std::int64_t> *wanted[] = {&c.shapes.value, &c.shapes.loc, &c.shapes.attn};
    for (int i = 0; i < 3; ++i) {
        expect_shape(*grads[i].first, grads[i].second, *wanted[i]);
        expect_dtype_and_device(*grads[i].first, grads[i].second, c.dtype, " (the dtype of value)");
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

#ifdef TPA_WITH_CUDA
namespace cu = msda::cuda;

template <typename Array>
void expect_dense(const Array &a, const char *name) {
    if (a.size() == 0)
        return;  // nothing is read or written; torch gives empty tensors arbitrary strides
    std::int64_t expected = 1;
    for (std::size_t i = a.ndim(); i-- > 0;) {
        if (a.shape(i) != 1 && a.stride(i) != expected)
            throw nb::value_error((std::string(name) + ": the CUDA kernel needs a contiguous "
                                                       "tensor")
                                      .c_str());
        expected *= static_cast<std::int64_t>(a.shape(i));
    }
}

/// A CUDA input or output: the expected dtype, device type and device, dense.
template <typename Array>
void expect_cuda(const Array &a, const char *name, nb::dlpack::dtype dtype, const char *why,
                 int device_id) {
    expect_dtype_and_device(a, name, dtype, why, nb::device::cuda::value);
    if (a.device_id() != device_id)
        throw nb::value_error((std::string(name) + ": expected CUDA device " +
                               std::to_string(device_id) + " (the device of value), got " +
                               std::to_string(a.device_id()))
                                  .c_str());
    expect_dense(a, name);
}

/// Checks the five inputs for the CUDA kernels. Level metadata stays on the device (reading it
/// would synchronize): the kernels treat a level that does not fit in value as empty instead.
std::pair<cu::Problem, Shapes> check_cuda(const Input &value, const Input &shapes,
                                          const Input &starts, const Input &loc,
                                          const Input &attn) {
    Shapes s = check_shapes(value, shapes, starts, loc, attn);
    const nb::dlpack::dtype dt = value.dtype();
    const nb::dlpack::dtype half{static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    const nb::dlpack::dtype bf16{static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
    if (dt != nb::dtype<float>() && dt != half && dt != bf16)
        throw nb::type_error(("value: expected dtype float32, float16 or bfloat16 on CUDA, got " +
                              dtype_name(dt))
                                 .c_str());
    const int dev = value.device_id();
    expect_cuda(value, "value", dt, "", dev);
    expect_cuda(loc, "sampling_locations", dt, " (the dtype of value)", dev);
    expect_cuda(attn, "attention_weights", dt, " (the dtype of value)", dev);
    expect_cuda(shapes, "spatial_shapes", nb::dtype<std::int64_t>(), "", dev);
    expect_cuda(starts, "level_start_index", nb::dtype<std::int64_t>(), "", dev);
    const cu::Dtype kind = dt == half ? cu::Dtype::float16
                         : dt == bf16 ? cu::Dtype::bfloat16
                                      : cu::Dtype::float32;
    const auto &v = s.value;
    cu::Problem p{v[0], v[1], v[2], v[3], s.loc[1], s.levels, s.loc[4],
                  static_cast<const std::int64_t *>(shapes.data()),
                  static_cast<const std::int64_t *>(starts.data()), kind};
    return {p, std::move(s)};
}

void raise_on(cudaError_t err, const char *what) {
    if (err != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": CUDA error: " + cudaGetErrorString(err));
}

void forward_cuda(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
                  const Input &attn, const Output &out, std::uintptr_t stream) {
    const auto [p, s] = check_cuda(value, shapes, starts, loc, attn);
    expect_shape(out, "output", s.out);
    expect_cuda(out, "output", value.dtype(), " (the dtype of value)", value.device_id());
    raise_on(cu::forward(p, value.data(), loc.data(), attn.data(), out.data(),
                         reinterpret_cast<cudaStream_t>(stream)),
             "ms_deform_attn_forward_cuda");
}

void backward_cuda(const Input &value, const Input &shapes, const Input &starts,
                   const Input &loc, const Input &attn, const Input &grad_out,
                   const Output &grad_value, const Output &grad_loc, const Output &grad_attn,
                   std::optional<Output> workspace, std::optional<Input> bound,
                   std::uintptr_t stream) {
    const auto [p, s] = check_cuda(value, shapes, starts, loc, attn);
    const int dev = value.device_id();
    const char *same = " (the dtype of value)";
    expect_shape(grad_out, "grad_output", s.out);
    expect_cuda(grad_out, "grad_output", value.dtype(), same, dev);
    expect_shape(grad_value, "grad_value", s.value);
    expect_cuda(grad_value, "grad_value", value.dtype(), same, dev);
    expect_shape(grad_loc, "grad_sampling_locations", s.loc);
    expect_cuda(grad_loc, "grad_sampling_locations", value.dtype(), same, dev);
    expect_shape(grad_attn, "grad_attention_weights", s.attn);
    expect_cuda(grad_attn, "grad_attention_weights", value.dtype(), same, dev);
    // The workspace's dtype picks the accumulation: none (float32 only), float32 or int64.
    cu::BackwardScratch scratch{cu::Accumulation::direct, nullptr, nullptr};
    if (workspace) {
        expect_shape(*workspace, "workspace", s.value);
        const bool fixed = workspace->dtype() == nb::dtype<std::int64_t>();
        expect_cuda(*workspace, "workspace", fixed ? nb::dtype<std::int64_t>() : nb::dtype<float>(),
                    " (float32 or int64)", dev);
        scratch = {fixed ? cu::Accumulation::fixed_point : cu::Accumulation::float_workspace,
                   workspace->data(), nullptr};
        if (fixed) {
            if (!bound)
                throw nb::value_error("bound: an int64 workspace needs the bound scalar");
            expect_shape(*bound, "bound", {});
            expect_cuda(*bound, "bound", nb::dtype<float>(), "", dev);
            scratch.bound = static_cast<const float *>(bound->data());
        }
    } else if (p.dtype != cu::Dtype::float32) {
        throw nb::value_error("workspace: float16/bfloat16 need a float32 or int64 workspace");
    }
    raise_on(cu::backward(p, value.data(), loc.data(), attn.data(), grad_out.data(),
                          grad_value.data(), grad_loc.data(), grad_attn.data(), scratch,
                          reinterpret_cast<cudaStream_t>(stream)),
             "ms_deform_attn_backward_cuda");
}
#endif

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
#ifdef TPA_WITH_CUDA
    m.def("ms_deform_attn_forward_cuda", &forward_cuda, nb::arg("value"),
          nb::arg("spatial_shapes"), nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("output"), nb::arg("stream"),
          "Enqueue MSDA of contiguous float32/float16/bfloat16 CUDA arrays on `stream`, writing "
          "all of output (N, Lq, M, D).");
    m.def("ms_deform_attn_backward_cuda", &backward_cuda, nb::arg("value"),
          nb::arg("spatial_shapes"), nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("grad_output"), nb::arg("grad_value"),
          nb::arg("grad_sampling_locations"), nb::arg("grad_attention_weights"),
          nb::arg("workspace").none(), nb::arg("bound").none(), nb::arg("stream"),
          "Enqueue the backward on `stream`, overwriting the three gradients. workspace (value's "
          "shape): None (float32, float atomics into grad_value), float32 (float atomics, then a "
          "cast) or int64 (deterministic fixed point; bound = max|grad_output| * sum|weights|).");
#endif
}

}  // namespace turbo_physai::bindings
