// csrc/bindings/ms_deform_attn.cpp: nb::ndarray front of the MSDA CPU and CUDA kernels; checks first.
//
// Arrays arrive through DLPack (torch tensors, numpy arrays) and are never copied or converted
// here: a wrong dtype, device or shape is an error that names the array, the expected and the
// actual value (msda_checks.h). This is the memory-safety boundary of the kernel, and the only
// input check of the op's eager fast path, so it checks everything the kernel relies on,
// including the data-dependent level checks a fake tensor cannot do.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string_view.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "interruptible.h"
#include "msda_checks.h"
#include "ms_deform_attn/ms_deform_attn.h"
#ifdef TPA_WITH_CUDA
#include "cuda_device.h"
#include "ms_deform_attn/ms_deform_attn_cuda.h"
#endif

namespace turbo_physai::bindings {
namespace {

namespace msda = kernels::msda;
using namespace msda_checks;

template <typename T, int Rank, typename Array>
msda::Strided<T, Rank> strided(const Array &a) {
    msda::Strided<T, Rank> s{static_cast<T *>(const_cast<void *>(a.data())), {}};
    for (int i = 0; i < Rank; ++i)
        s.stride[i] = a.stride(static_cast<std::size_t>(i));
    return s;
}

// output or grad_output in either accepted layout, as the kernels' (N, Lq, M, D).
template <typename T, typename Array>
msda::Strided<T, 4> heads(const Array &a, const char *name, const Shapes &s, const Input &value) {
    return {static_cast<T *>(const_cast<void *>(a.data())), heads_strides(a, name, s, value)};
}

/// Everything the CPU kernel needs from the five inputs, once they have been checked.
struct Checked {
    msda::Problem problem;
    Shapes shapes;
};

Checked check_cpu(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
                  const Input &attn) {
    Shapes s = check_inputs(value, shapes, starts, loc, attn, Target::cpu);
    auto levels = msda::make_levels(static_cast<const std::int64_t *>(shapes.data()),
                                    {shapes.stride(0), shapes.stride(1)},
                                    static_cast<const std::int64_t *>(starts.data()),
                                    starts.stride(0), s.levels, s.value[1]);
    const auto &v = s.value;
    return {{v[0], v[1], v[2], v[3], s.loc[1], s.loc[4], std::move(levels)}, std::move(s)};
}

template <typename T>
msda::Inputs<T> inputs_of(const Input &value, const Input &loc, const Input &attn) {
    return {strided<const T, 4>(value), strided<const T, 6>(loc), strided<const T, 5>(attn)};
}

/// The multiply-adds of the forward (as a double: expanded inputs may have sizes whose product
/// overflows), for run_interruptible; the backward does about three times as many.
double forward_work(const msda::Problem &p) {
    return static_cast<double>(p.batch) * static_cast<double>(p.queries) *
           static_cast<double>(p.heads) * static_cast<double>(p.levels.size()) *
           static_cast<double>(p.points) * (4.0 * static_cast<double>(p.channels) + 1.0);
}

void forward(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
             const Input &attn, const Output &out, int max_threads) {
    Checked c = check_cpu(value, shapes, starts, loc, attn);
    std::atomic<bool> stop{false};
    c.problem.stop = &stop;
    const auto run = [&](auto zero) {
        using T = decltype(zero);
        const msda::Strided<T, 4> o = heads<T>(out, "output", c.shapes, value);
        run_interruptible(forward_work(c.problem), stop, [&] {
            msda::forward<T>(c.problem, inputs_of<T>(value, loc, attn), o, max_threads);
        });
    };
    if (value.dtype() == nb::dtype<float>())
        run(0.0f);
    else
        run(0.0);
}

void backward(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
              const Input &attn, const Input &grad_out, const Output &grad_value,
              const Output &grad_loc, const Output &grad_attn, int max_threads) {
    Checked c = check_cpu(value, shapes, starts, loc, attn);
    std::atomic<bool> stop{false};
    c.problem.stop = &stop;
    const auto &s = c.shapes;
    expect_array(grad_value, "grad_value", s.value, "the shape of value", value.dtype(),
                 "the dtype of value", value);
    expect_array(grad_loc, "grad_sampling_locations", s.loc, "the shape of sampling_locations",
                 s.points, "the dtype of sampling_locations", value);
    expect_array(grad_attn, "grad_attention_weights", s.attn, "the shape of attention_weights",
                 s.points, "the dtype of sampling_locations", value);
    const auto run = [&](auto zero) {
        using T = decltype(zero);
        const msda::Strided<const T, 4> g = heads<const T>(grad_out, "grad_output", s, value);
        const double work = 3.0 * forward_work(c.problem) + static_cast<double>(grad_value.size());
        run_interruptible(work, stop, [&] {
            msda::backward<T>(c.problem, inputs_of<T>(value, loc, attn), g,
                              {strided<T, 4>(grad_value), strided<T, 6>(grad_loc),
                               strided<T, 5>(grad_attn)},
                              max_threads);
        });
    };
    if (value.dtype() == nb::dtype<float>())
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

/// A dtype check_inputs accepted for CUDA: float32, float16 or bfloat16.
cu::Dtype kind_of(nb::dlpack::dtype dt) {
    return dt == nb::dtype<float>() ? cu::Dtype::float32
         : dt.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat)
             ? cu::Dtype::bfloat16
             : cu::Dtype::float16;
}

/// Checks the five inputs for the CUDA kernels. Level metadata stays on the device (reading it
/// would synchronize): the kernels treat a level that does not fit in value as empty instead.
std::pair<cu::Problem, Shapes> check_cuda(const Input &value, const Input &shapes,
                                          const Input &starts, const Input &loc,
                                          const Input &attn) {
    Shapes s = check_inputs(value, shapes, starts, loc, attn, Target::cuda);
    const std::pair<const Input *, const char *> arrays[] = {
        {&value, "value"}, {&shapes, "spatial_shapes"}, {&starts, "level_start_index"},
        {&loc, "sampling_locations"}, {&attn, "attention_weights"}};
    for (const auto &[a, name] : arrays)
        expect_dense(*a, name);
    const auto &v = s.value;
    cu::Problem p{v[0], v[1], v[2], v[3], s.loc[1], s.levels, s.loc[4],
                  static_cast<const std::int64_t *>(shapes.data()),
                  static_cast<const std::int64_t *>(starts.data()), kind_of(value.dtype()),
                  kind_of(s.points)};
    if (!cu::fits_int_indexing(p))
        throw nb::value_error(("value: the CUDA kernels index rows with 32-bit integers; S = " +
                               std::to_string(p.value_len) + " must be below 2^31 and M*D = " +
                               std::to_string(p.heads * p.channels) + " at most 2^29")
                                  .c_str());
    return {p, std::move(s)};
}

// output / grad_output on CUDA: either layout, dense (then both have the same memory order).
template <typename Array>
void expect_cuda_heads(const Array &a, const char *name, const Shapes &s, const Input &value) {
    heads_strides(a, name, s, value);
    expect_dense(a, name);
}

void raise_on(cudaError_t err, const char *what) {
    if (err != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": CUDA error: " + cudaGetErrorString(err));
}

void forward_cuda(const Input &value, const Input &shapes, const Input &starts, const Input &loc,
                  const Input &attn, const Output &out, std::uintptr_t stream) {
    const auto [p, s] = check_cuda(value, shapes, starts, loc, attn);
    expect_cuda_heads(out, "output", s, value);
    const CudaDeviceGuard on_device(value.device_id());
    raise_on(cu::forward(p, value.data(), loc.data(), attn.data(), out.data(),
                         reinterpret_cast<cudaStream_t>(stream)),
             "ms_deform_attn_forward_cuda");
}

/// The sorted accumulation's scheme by name ("auto", "corners", "anchors").
cu::SortedScheme scheme_named(std::string_view name) {
    if (name == "auto")
        return cu::SortedScheme::automatic;
    if (name == "corners")
        return cu::SortedScheme::corners;
    if (name == "anchors")
        return cu::SortedScheme::anchors;
    throw nb::value_error(("scheme: expected 'auto', 'corners' or 'anchors', got '" +
                           std::string(name) + "'").c_str());
}

void backward_cuda(const Input &value, const Input &shapes, const Input &starts,
                   const Input &loc, const Input &attn, const Input &grad_out,
                   const Output &grad_value, const Output &grad_loc, const Output &grad_attn,
                   std::optional<Output> workspace, std::optional<Input> bound,
                   std::optional<Output> flags, std::uintptr_t stream, std::string_view scheme) {
    const auto [p, s] = check_cuda(value, shapes, starts, loc, attn);
    expect_cuda_heads(grad_out, "grad_output", s, value);
    const std::tuple<const Output *, const char *, const std::vector<std::int64_t> *,
                     const char *>
        grads[] = {{&grad_value, "grad_value", &s.value, "the shape of value"},
                   {&grad_loc, "grad_sampling_locations", &s.loc,
                    "the shape of sampling_locations"},
                   {&grad_attn, "grad_attention_weights", &s.attn,
                    "the shape of attention_weights"}};
    for (const auto &[g, name, shape, source] : grads) {
        const bool of_value = g == &grad_value;
        expect_array(*g, name, *shape, source, of_value ? value.dtype() : s.points,
                     of_value ? "the dtype of value" : "the dtype of sampling_locations", value);
        expect_dense(*g, name);
    }
    // The sort's temporary bytes depend on the device's architecture: ask on value's device.
    const CudaDeviceGuard on_device(value.device_id());
    // The workspace's dtype picks the accumulation: none (float32 only), float32, int64 or
    // uint8 (sorted).
    cu::BackwardScratch scratch{cu::Accumulation::direct, nullptr, nullptr, nullptr};
    const cu::SortedScheme sorted = scheme_named(scheme);
    if (workspace && workspace->dtype() == nb::dtype<std::uint8_t>()) {
        const std::size_t bytes = cu::sorted_scratch_bytes(p, sorted);
        if (bytes == 0)
            throw nb::value_error("workspace: the sorted accumulation indexes entries and rows "
                                  "with 32 bits; this problem needs the int64 workspace");
        expect_array(*workspace, "workspace", {static_cast<std::int64_t>(bytes)},
                     "ms_deform_attn_sorted_workspace_bytes", nb::dtype<std::uint8_t>(), "uint8",
                     value);
        if (reinterpret_cast<std::uintptr_t>(workspace->data()) % 256 != 0)
            throw nb::value_error("workspace: the sorted accumulation needs 256-byte alignment");
        scratch = {cu::Accumulation::sorted, workspace->data(), nullptr, nullptr, sorted};
    } else if (workspace) {
        const bool fixed = workspace->dtype() == nb::dtype<std::int64_t>();
        expect_array(*workspace, "workspace", s.value, "the shape of value",
                     fixed ? nb::dtype<std::int64_t>() : nb::dtype<float>(),
                     "float32, int64 or uint8", value);
        expect_dense(*workspace, "workspace");
        scratch = {fixed ? cu::Accumulation::fixed_point : cu::Accumulation::float_workspace,
                   workspace->data(), nullptr, nullptr};
        if (fixed) {
            if (!bound || !flags)
                throw nb::value_error("bound, flags: an int64 workspace needs both");
            expect_array(*bound, "bound", {}, "a scalar", nb::dtype<double>(), "float64", value);
            const auto elements = static_cast<std::int64_t>(value.size());
            expect_array(*flags, "flags", {(elements + 7) / 8}, "(value.numel() + 7) // 8",
                         nb::dtype<std::int32_t>(), "int32", value);
            expect_dense(*flags, "flags");
            scratch.bound = static_cast<const double *>(bound->data());
            scratch.flags = static_cast<unsigned *>(flags->data());
        }
    } else if (p.dtype != cu::Dtype::float32) {
        throw nb::value_error("workspace: float16/bfloat16 need a float32 or int64 workspace");
    }
    raise_on(cu::backward(p, value.data(), loc.data(), attn.data(), grad_out.data(),
                          grad_value.data(), grad_loc.data(), grad_attn.data(), scratch,
                          reinterpret_cast<cudaStream_t>(stream)),
             "ms_deform_attn_backward_cuda");
}

/// A problem of these sizes, for the sorted path's host-side rules; `caller` names the query in
/// the error for a negative size.
cu::Problem sizes_only(const char *caller, std::int64_t batch, std::int64_t value_len,
                       std::int64_t heads, std::int64_t channels, std::int64_t queries,
                       std::int64_t levels, std::int64_t points) {
    for (const std::int64_t size : {batch, value_len, heads, channels, queries, levels, points})
        if (size < 0)
            throw nb::value_error((std::string(caller) + ": sizes must be >= 0").c_str());
    return {batch, value_len, heads, channels, queries, levels, points, nullptr, nullptr,
            cu::Dtype::float32};
}

/// Whether the sorted backward with `scheme` sorts these sizes' entries by blocks.
bool sorted_by_blocks(std::int64_t batch, std::int64_t value_len, std::int64_t heads,
                      std::int64_t queries, std::int64_t levels, std::int64_t points,
                      std::string_view scheme) {
    const cu::Problem p = sizes_only("ms_deform_attn_sorted_by_blocks", batch, value_len, heads,
                                     0, queries, levels, points);
    return cu::sorted_by_blocks(p, scheme_named(scheme));
}

/// The scheme the sorted backward takes for these sizes when asked for `scheme` ("auto": by
/// density), as "corners" or "anchors".
const char *sorted_scheme(std::int64_t batch, std::int64_t value_len, std::int64_t heads,
                          std::int64_t queries, std::int64_t levels, std::int64_t points,
                          std::string_view scheme) {
    const cu::Problem p = sizes_only("ms_deform_attn_sorted_scheme", batch, value_len, heads, 0,
                                     queries, levels, points);
    return cu::sorted_scheme(p, scheme_named(scheme)) == cu::SortedScheme::corners ? "corners"
                                                                                   : "anchors";
}

/// The sorted accumulation's workspace bytes for these sizes; 0 when it does not apply (entries or
/// rows beyond 32-bit indexing: the int64 workspace then).
std::size_t sorted_workspace_bytes(std::int64_t batch, std::int64_t value_len, std::int64_t heads,
                                   std::int64_t channels, std::int64_t queries,
                                   std::int64_t levels, std::int64_t points, int device,
                                   std::string_view scheme) {
    const cu::Problem p = sizes_only("ms_deform_attn_sorted_workspace_bytes", batch, value_len,
                                     heads, channels, queries, levels, points);
    const CudaDeviceGuard on_device(device);
    return cu::sorted_scratch_bytes(p, scheme_named(scheme));
}
#endif

}  // namespace

void bind_ms_deform_attn(nb::module_ &m) {
    m.def("ms_deform_attn_forward", &forward, nb::arg("value"), nb::arg("spatial_shapes"),
          nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("output"), nb::arg("max_threads") = 0,
          "Write MSDA of float32/float64 CPU arrays into output (N, Lq, M*D) or (N, Lq, M, D); "
          "all of it is written. Channel dimensions must have stride 1; other strides are free.");
    m.def("ms_deform_attn_backward", &backward, nb::arg("value"), nb::arg("spatial_shapes"),
          nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("grad_output"), nb::arg("grad_value"),
          nb::arg("grad_sampling_locations"), nb::arg("grad_attention_weights"),
          nb::arg("max_threads") = 0,
          "Overwrite the three gradient arrays from grad_output (N, Lq, M*D) or (N, Lq, M, D); "
          "deterministic.");
#ifdef TPA_WITH_CUDA
    m.def("ms_deform_attn_forward_cuda", &forward_cuda, nb::arg("value"),
          nb::arg("spatial_shapes"), nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("output"), nb::arg("stream"),
          "Enqueue MSDA of contiguous float32/float16/bfloat16 CUDA arrays on `stream`, writing "
          "all of output (N, Lq, M*D) or (N, Lq, M, D) in the locations' dtype: value's, or "
          "float32 with a 16-bit value (mixed precision).");
    m.def("ms_deform_attn_backward_cuda", &backward_cuda, nb::arg("value"),
          nb::arg("spatial_shapes"), nb::arg("level_start_index"), nb::arg("sampling_locations"),
          nb::arg("attention_weights"), nb::arg("grad_output"), nb::arg("grad_value"),
          nb::arg("grad_sampling_locations"), nb::arg("grad_attention_weights"),
          nb::arg("workspace").none(), nb::arg("bound").none(), nb::arg("flags").none(),
          nb::arg("stream"), nb::arg("scheme") = "auto",
          "Enqueue the backward on `stream`, overwriting the three gradients (grad_value in "
          "value's dtype, the others and grad_output in the locations'). workspace (value's "
          "shape): None (float32, float atomics into grad_value), float32 (float atomics, then a "
          "cast) or int64 (deterministic fixed point; bound: float64 scalar = max|finite "
          "grad_output| * sum|finite weights|; flags: int32 ((value.numel() + 7) // 8,), "
          "overwritten, for the non-finite terms) or uint8 (deterministic by sorting; "
          "ms_deform_attn_sorted_workspace_bytes(...) bytes for the same scheme, 256-byte "
          "aligned; scheme: 'auto', 'corners' or 'anchors', see ms_deform_attn_cuda.h).");
    m.def("ms_deform_attn_sorted_workspace_bytes", &sorted_workspace_bytes, nb::arg("batch"),
          nb::arg("value_len"), nb::arg("heads"), nb::arg("channels"), nb::arg("queries"),
          nb::arg("levels"), nb::arg("points"), nb::arg("device"), nb::arg("scheme") = "auto",
          "Bytes of the uint8 workspace of the sorted deterministic backward (N, S, M, D, Lq, "
          "L, P) on CUDA device `device` for `scheme` ('auto', 'corners' or 'anchors', as "
          "passed to the backward); 0 if the problem needs the int64 workspace instead.");
    m.def("ms_deform_attn_sorted_by_blocks", &sorted_by_blocks, nb::arg("batch"),
          nb::arg("value_len"), nb::arg("heads"), nb::arg("queries"), nb::arg("levels"),
          nb::arg("points"), nb::arg("scheme") = "auto",
          "Whether the sorted backward with `scheme` sorts the entries of these sizes (N, S, M, "
          "Lq, L, P) in shared-memory blocks, a head or (head, level) each, rather than with a "
          "device-wide sort: the corners scheme with a head's Lq*L*P*4 entries fitting a block.");
    m.def("ms_deform_attn_sorted_scheme", &sorted_scheme, nb::arg("batch"), nb::arg("value_len"),
          nb::arg("heads"), nb::arg("queries"), nb::arg("levels"), nb::arg("points"),
          nb::arg("scheme") = "auto",
          "The scheme ('corners' or 'anchors') the sorted backward takes for these sizes (N, S, "
          "M, Lq, L, P) when asked for `scheme`; 'auto': corners with fewer sampling points "
          "than grad_value rows, else anchors.");
#endif
}

}  // namespace turbo_physai::bindings
