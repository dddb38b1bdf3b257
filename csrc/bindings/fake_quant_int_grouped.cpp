// csrc/bindings/fake_quant_int_grouped.cpp: nb::ndarray front of the grouped-int kernels (CPU).
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "fake_quant_int_grouped/fake_quant_int_grouped.h"
#include "quant_arrays.h"
#ifdef TPA_WITH_CUDA
#include "fake_quant_int_grouped/fake_quant_int_grouped_cuda.h"
#endif

namespace turbo_physai::bindings {
namespace {

using namespace quant;  // CpuIn, CudaOut, ... (quant_arrays.h)

constexpr const char *kFakeQuant = "fake_quant_int_grouped";
constexpr const char *kUnpack = "unpack_int_grouped";

std::int64_t groups_of(std::int64_t cols, std::int64_t group_size) {
    return (cols + group_size - 1) / group_size;
}

// A (rows, groups) float32 scale, strides as given (0 where it is broadcast).
template <class In>
void check_scale(const In &scale, std::int64_t rows, std::int64_t groups, const char *op) {
    quant::require(scale.ndim() == 2 && static_cast<std::int64_t>(scale.shape(0)) == rows &&
                       static_cast<std::int64_t>(scale.shape(1)) == groups,
                   op,
                   "scale must have shape (" + std::to_string(rows) + ", " +
                       std::to_string(groups) + "), got " + quant::shape_of(scale));
}

void check_group(int bits, std::int64_t group_size, const char *op, int lowest, int highest) {
    quant::require(bits >= lowest && bits <= highest, op,
                   "bits must be in [" + std::to_string(lowest) + ", " + std::to_string(highest) +
                       "], got " + std::to_string(bits));
    quant::require(group_size > 0, op,
                   "group_size must be positive, got " + std::to_string(group_size));
}

template <class In, class Out>
kernels::IntGroupedArgs fake_quant_args(const In &w, const Out &out, const std::optional<In> &scale,
                                        int bits, std::int64_t group_size) {
    check_group(bits, group_size, kFakeQuant, 1, 16);
    quant::require_ndim(w, 2, kFakeQuant, "weight");
    quant::require(w.shape(1) <= 1 || w.stride(1) == 1, kFakeQuant,
                   "weight's columns must be contiguous");
    quant::require_contiguous(out, kFakeQuant, "out");
    quant::require_same_shape(out, "out", w, "weight", kFakeQuant);
    kernels::IntGroupedArgs a{};
    a.w = w.data();
    a.out = out.data();
    a.rows = static_cast<std::int64_t>(w.shape(0));
    a.cols = static_cast<std::int64_t>(w.shape(1));
    a.w_row_stride = w.stride(0);
    a.group_size = group_size;
    a.bits = bits;
    if (scale) {
        check_scale(*scale, a.rows, groups_of(a.cols, group_size), kFakeQuant);
        a.scale = scale->data();
        a.scale_row_stride = scale->stride(0);
        a.scale_group_stride = scale->stride(1);
    }
    return a;
}

template <class P, class In, class Out>
kernels::UnpackIntGroupedArgs unpack_args(const P &payload, const In &scale, const Out &out,
                                          int bits, std::int64_t group_size) {
    check_group(bits, group_size, kUnpack, 2, 4);
    quant::require(bits != 3, kUnpack, "bits must be 2 or 4, got 3");
    quant::require_ndim(payload, 2, kUnpack, "payload");
    quant::require_ndim(out, 2, kUnpack, "out");
    quant::require(payload.shape(1) <= 1 || payload.stride(1) == 1, kUnpack,
                   "payload's columns must be contiguous");
    quant::require_contiguous(out, kUnpack, "out");
    kernels::UnpackIntGroupedArgs a{};
    a.payload = payload.data();
    a.payload_row_stride = payload.stride(0);
    a.payload_cols = static_cast<std::int64_t>(payload.shape(1));
    a.rows = static_cast<std::int64_t>(payload.shape(0));
    a.width = static_cast<std::int64_t>(out.shape(1));
    const std::int64_t codes = a.payload_cols * (8 / bits);
    quant::require(static_cast<std::int64_t>(out.shape(0)) == a.rows && a.width <= codes, kUnpack,
                   "out must have shape (" + std::to_string(a.rows) + ", <= " +
                       std::to_string(codes) + "), got " + quant::shape_of(out));
    check_scale(scale, a.rows, groups_of(a.width, group_size), kUnpack);
    a.scale = scale.data();
    a.scale_row_stride = scale.stride(0);
    a.scale_group_stride = scale.stride(1);
    a.out = out.data();
    a.group_size = group_size;
    a.bits = bits;
    return a;
}

void fake_quant_cpu(const CpuIn &w, const CpuOut &out, std::optional<CpuIn> scale, int bits,
                    std::int64_t group_size, int max_threads) {
    const auto a = fake_quant_args(w, out, scale, bits, group_size);
    nb::gil_scoped_release released;
    kernels::fake_quant_int_grouped_cpu(a, max_threads);
}

void unpack_cpu(const CpuPayload &payload, const CpuIn &scale, const CpuOut &out, int bits,
                std::int64_t group_size, int max_threads) {
    const auto a = unpack_args(payload, scale, out, bits, group_size);
    nb::gil_scoped_release released;
    kernels::unpack_int_grouped_cpu(a, max_threads);
}

#ifdef TPA_WITH_CUDA

void fake_quant_cuda(const CudaIn &w, const CudaOut &out, std::optional<CudaIn> scale, int bits,
                     std::int64_t group_size, std::uintptr_t stream) {
    quant::require(quant::on_one_device(w, out) && (!scale || quant::on_one_device(w, *scale)),
                   kFakeQuant, "weight, out and scale must be on the same CUDA device");
    quant::launch(kernels::fake_quant_int_grouped_cuda,
                  fake_quant_args(w, out, scale, bits, group_size), w.device_id(), stream,
                  kFakeQuant);
}

void unpack_cuda(const CudaPayload &payload, const CudaIn &scale, const CudaOut &out, int bits,
                 std::int64_t group_size, std::uintptr_t stream) {
    quant::require(quant::on_one_device(payload, scale, out), kUnpack,
                   "payload, scale and out must be on the same CUDA device");
    quant::launch(kernels::unpack_int_grouped_cuda,
                  unpack_args(payload, scale, out, bits, group_size), payload.device_id(), stream,
                  kUnpack);
}
#endif

}  // namespace

void bind_fake_quant_int_grouped(nb::module_ &m) {
    m.def("fake_quant_int_grouped_cpu", &fake_quant_cpu, nb::arg("weight").noconvert(),
          nb::arg("out").noconvert(), nb::arg("scale").noconvert().none(), nb::arg("bits"),
          nb::arg("group_size"), nb::arg("max_threads") = 0,
          "LibreYOLO's fake_quant_int_grouped forward (w + (q - w)) of a 2-d float32 weight; "
          "scale (rows, groups) or None (from each group's amax).");
    m.def("unpack_int_grouped_cpu", &unpack_cpu, nb::arg("payload").noconvert(),
          nb::arg("scale").noconvert(), nb::arg("out").noconvert(), nb::arg("bits"),
          nb::arg("group_size"), nb::arg("max_threads") = 0,
          "LibreYOLO's unpack_int_grouped_weight into `out` (rows, width <= codes a row).");
#ifdef TPA_WITH_CUDA
    m.def("fake_quant_int_grouped_cuda", &fake_quant_cuda, nb::arg("weight").noconvert(),
          nb::arg("out").noconvert(), nb::arg("scale").noconvert().none(), nb::arg("bits"),
          nb::arg("group_size"), nb::arg("stream"), "As the CPU kernel, on `stream`.");
    m.def("unpack_int_grouped_cuda", &unpack_cuda, nb::arg("payload").noconvert(),
          nb::arg("scale").noconvert(), nb::arg("out").noconvert(), nb::arg("bits"),
          nb::arg("group_size"), nb::arg("stream"), "As the CPU kernel, on `stream`.");
#endif
}

}  // namespace turbo_physai::bindings
