// csrc/bindings/fake_quant_fp4.cpp: nb::ndarray front of the MXFP4/NVFP4 kernels (CPU).
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.h"
#include "fake_quant_fp4/fake_quant_fp4.h"
#include "quant_arrays.h"
#ifdef TPA_WITH_CUDA
#include "fake_quant_fp4/fake_quant_fp4_cuda.h"
#endif

namespace turbo_physai::bindings {
namespace {

using namespace quant;  // CpuIn, CudaOut, ... (quant_arrays.h)

constexpr const char *kFakeQuant = "fake_quant_fp4";
constexpr const char *kUnpack = "unpack_nvfp4";

kernels::Fp4Format format_of(const std::string &name) {
    if (name == "mx")
        return kernels::Fp4Format::mx;
    quant::require(name == "nv", kFakeQuant, "format must be 'mx' or 'nv', got '" + name + "'");
    return kernels::Fp4Format::nv;
}

std::int64_t blocks_of(std::int64_t cols, std::int64_t block) { return (cols + block - 1) / block; }

template <class In, class Out>
kernels::Fp4Args fake_quant_args(const In &x, const Out &out, const Out &block_scales,
                                 const std::string &format, const std::optional<In> &tensor_amax) {
    kernels::Fp4Args a{};
    a.format = format_of(format);
    quant::require_ndim(x, 2, kFakeQuant, "x");
    quant::require_contiguous(x, kFakeQuant, "x");
    quant::require_contiguous(out, kFakeQuant, "out");
    quant::require_same_shape(out, "out", x, "x", kFakeQuant);
    a.rows = static_cast<std::int64_t>(x.shape(0));
    a.cols = static_cast<std::int64_t>(x.shape(1));
    const std::int64_t blocks = blocks_of(a.cols, kernels::fp4_block(a.format));
    quant::require(block_scales.ndim() == 2 && quant::contiguous(block_scales) &&
                       static_cast<std::int64_t>(block_scales.shape(0)) == a.rows &&
                       static_cast<std::int64_t>(block_scales.shape(1)) == blocks,
                   kFakeQuant,
                   "block_scales must be a contiguous (" + std::to_string(a.rows) + ", " +
                       std::to_string(blocks) + ") array, got " + quant::shape_of(block_scales));
    if (tensor_amax) {
        quant::require(a.format == kernels::Fp4Format::nv && tensor_amax->size() == 1,
                       kFakeQuant, "tensor_amax is one float, for format 'nv' only");
        a.tensor_amax = tensor_amax->data();
    }
    a.x = x.data();
    a.out = out.data();
    a.block_scales = block_scales.data();
    return a;
}

template <class In, class Out>
kernels::Fp4BackwardArgs backward_args(const In &grad, const In &block_scales, const Out &grad_x,
                                       std::int64_t block) {
    quant::require(block == 16 || block == 32, kFakeQuant,
                   "block must be 16 or 32, got " + std::to_string(block));
    quant::require_ndim(grad, 2, kFakeQuant, "grad");
    quant::require_contiguous(grad, kFakeQuant, "grad");
    quant::require_contiguous(grad_x, kFakeQuant, "grad_x");
    quant::require_same_shape(grad_x, "grad_x", grad, "grad", kFakeQuant);
    kernels::Fp4BackwardArgs a{grad.data(), block_scales.data(), grad_x.data(),
                               static_cast<std::int64_t>(grad.shape(0)),
                               static_cast<std::int64_t>(grad.shape(1)), block};
    quant::require(block_scales.ndim() == 2 && quant::contiguous(block_scales) &&
                       static_cast<std::int64_t>(block_scales.shape(0)) == a.rows &&
                       static_cast<std::int64_t>(block_scales.shape(1)) ==
                           blocks_of(a.cols, block),
                   kFakeQuant, "block_scales has shape " + quant::shape_of(block_scales) +
                                   ", expected (rows, ceil(cols / block)) of grad");
    return a;
}

template <class P, class In, class Out>
kernels::UnpackNvfp4Args unpack_args(const P &payload, const In &block_scale,
                                     const In &tensor_amax, const Out &out) {
    quant::require(tensor_amax.size() == 1, kUnpack, "tensor_amax must have one element");
    quant::require_ndim(payload, 2, kUnpack, "payload");
    quant::require_ndim(out, 2, kUnpack, "out");
    quant::require(payload.shape(1) <= 1 || payload.stride(1) == 1, kUnpack,
                   "payload's columns must be contiguous");
    quant::require_contiguous(out, kUnpack, "out");
    kernels::UnpackNvfp4Args a{};
    a.payload = payload.data();
    a.payload_row_stride = payload.stride(0);
    a.rows = static_cast<std::int64_t>(payload.shape(0));
    a.width = static_cast<std::int64_t>(out.shape(1));
    const std::int64_t codes = 2 * static_cast<std::int64_t>(payload.shape(1));
    quant::require(static_cast<std::int64_t>(out.shape(0)) == a.rows && a.width <= codes, kUnpack,
                   "out must have shape (" + std::to_string(a.rows) + ", <= " +
                       std::to_string(codes) + "), got " + quant::shape_of(out));
    const std::int64_t blocks = blocks_of(a.width, 16);
    quant::require(block_scale.ndim() == 2 &&
                       static_cast<std::int64_t>(block_scale.shape(0)) == a.rows &&
                       static_cast<std::int64_t>(block_scale.shape(1)) == blocks,
                   kUnpack,
                   "block_scale must have shape (" + std::to_string(a.rows) + ", " +
                       std::to_string(blocks) + "), got " + quant::shape_of(block_scale));
    a.block_scale = block_scale.data();
    a.block_row_stride = block_scale.stride(0);
    a.block_stride = block_scale.stride(1);
    a.tensor_amax = tensor_amax.data();
    a.out = out.data();
    return a;
}

void fake_quant_cpu(const CpuIn &x, const CpuOut &out, const CpuOut &block_scales,
                    const std::string &format, std::optional<CpuIn> tensor_amax,
                    int max_threads) {
    const auto a = fake_quant_args(x, out, block_scales, format, tensor_amax);
    nb::gil_scoped_release released;
    kernels::fake_quant_fp4_cpu(a, max_threads);
}

void backward_cpu(const CpuIn &grad, const CpuIn &block_scales, const CpuOut &grad_x,
                  std::int64_t block, int max_threads) {
    const auto a = backward_args(grad, block_scales, grad_x, block);
    nb::gil_scoped_release released;
    kernels::fake_quant_fp4_backward_cpu(a, max_threads);
}

void unpack_cpu(const CpuPayload &payload, const CpuIn &block_scale, const CpuIn &tensor_amax,
                const CpuOut &out, int max_threads) {
    const auto a = unpack_args(payload, block_scale, tensor_amax, out);
    nb::gil_scoped_release released;
    kernels::unpack_nvfp4_cpu(a, max_threads);
}

#ifdef TPA_WITH_CUDA

// `scratch`: one zeroed float for NV's dynamic amax (ignored otherwise).
void fake_quant_cuda(const CudaIn &x, const CudaOut &out, const CudaOut &block_scales,
                     const std::string &format, std::optional<CudaIn> tensor_amax,
                     const CudaOut &scratch, std::uintptr_t stream) {
    quant::require(quant::on_one_device(x, out, block_scales, scratch) &&
                       (!tensor_amax || quant::on_one_device(x, *tensor_amax)),
                   kFakeQuant, "all arrays must be on the same CUDA device");
    quant::require(scratch.size() >= 1, kFakeQuant, "scratch must hold one float");
    kernels::Fp4Args a = fake_quant_args(x, out, block_scales, format, tensor_amax);
    a.amax_scratch = scratch.data();
    quant::launch(kernels::fake_quant_fp4_cuda, a, x.device_id(), stream, kFakeQuant);
}

void backward_cuda(const CudaIn &grad, const CudaIn &block_scales, const CudaOut &grad_x,
                   std::int64_t block, std::uintptr_t stream) {
    quant::require(quant::on_one_device(grad, block_scales, grad_x), kFakeQuant,
                   "grad, block_scales and grad_x must be on the same CUDA device");
    quant::launch(kernels::fake_quant_fp4_backward_cuda,
                  backward_args(grad, block_scales, grad_x, block), grad.device_id(), stream,
                  kFakeQuant);
}

void unpack_cuda(const CudaPayload &payload, const CudaIn &block_scale, const CudaIn &tensor_amax,
                 const CudaOut &out, std::uintptr_t stream) {
    quant::require(quant::on_one_device(payload, block_scale, tensor_amax, out), kUnpack,
                   "payload, block_scale, tensor_amax and out must be on the same CUDA device");
    quant::launch(kernels::unpack_nvfp4_cuda, unpack_args(payload, block_scale, tensor_amax, out),
                  payload.device_id(), stream, kUnpack);
}
#endif

}  // namespace

void bind_fake_quant_fp4(nb::module_ &m) {
    m.def("fake_quant_fp4_cpu", &fake_quant_cpu, nb::arg("x").noconvert(),
          nb::arg("out").noconvert(), nb::arg("block_scales").noconvert(), nb::arg("format"),
          nb::arg("tensor_amax").noconvert().none() = nb::none(), nb::arg("max_threads") = 0,
          "LibreYOLO's MXFP4 ('mx') or NVFP4 ('nv') fake quantization of a contiguous (rows, "
          "cols) float32 array along cols; writes each block's effective scale.");
    m.def("fake_quant_fp4_backward_cpu", &backward_cpu, nb::arg("grad").noconvert(),
          nb::arg("block_scales").noconvert(), nb::arg("grad_x").noconvert(), nb::arg("block"),
          nb::arg("max_threads") = 0, "grad_x = (grad * eff) / eff, eff the block's scale.");
    m.def("unpack_nvfp4_cpu", &unpack_cpu, nb::arg("payload").noconvert(),
          nb::arg("block_scale").noconvert(), nb::arg("tensor_amax").noconvert(),
          nb::arg("out").noconvert(),
          nb::arg("max_threads") = 0,
          "LibreYOLO's unpack_nvfp4_weight into `out` (rows, width <= 2 * payload columns).");
#ifdef TPA_WITH_CUDA
    m.def("fake_quant_fp4_cuda", &fake_quant_cuda, nb::arg("x").noconvert(),
          nb::arg("out").noconvert(), nb::arg("block_scales").noconvert(), nb::arg("format"),
          nb::arg("tensor_amax").noconvert().none(), nb::arg("scratch").noconvert(),
          nb::arg("stream"), "As the CPU kernel on `stream`; `scratch` one zeroed float.");
    m.def("fake_quant_fp4_backward_cuda", &backward_cuda, nb::arg("grad").noconvert(),
          nb::arg("block_scales").noconvert(), nb::arg("grad_x").noconvert(), nb::arg("block"),
          nb::arg("stream"), "As the CPU kernel, on `stream`.");
    m.def("unpack_nvfp4_cuda", &unpack_cuda, nb::arg("payload").noconvert(),
          nb::arg("block_scale").noconvert(), nb::arg("tensor_amax").noconvert(),
          nb::arg("out").noconvert(), nb::arg("stream"),
          "As the CPU kernel, on `stream`.");
#endif
}

}  // namespace turbo_physai::bindings
