// csrc/bindings/fake_quant_int8.cpp: nb::ndarray front of the int8 fake-quantization kernels.
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "fake_quant_int8/fake_quant_int8.h"
#include "quant_arrays.h"
#ifdef TPA_WITH_CUDA
#include "fake_quant_int8/fake_quant_int8_cuda.h"
#endif

namespace turbo_physai::bindings {
namespace {

using namespace quant;  // CpuIn, CudaOut, ... (quant_arrays.h)

constexpr const char *kPerChannel = "fake_quant_int8_per_channel";
constexpr const char *kAffine = "fake_quant_int8_affine";

struct ChannelView {
    std::int64_t outer, channels, inner;
};

// x (contiguous) seen as outer x channels x inner around `axis`; scale has one float a channel.
template <class X, class S>
ChannelView channel_view(const X &x, const S &scale, int axis) {
    quant::require_contiguous(x, kPerChannel, "x");
    quant::require(axis >= 0 && static_cast<std::size_t>(axis) < x.ndim(), kPerChannel,
                   "channel_axis " + std::to_string(axis) + " is not a dimension of x with shape " +
                       quant::shape_of(x));
    ChannelView v{1, static_cast<std::int64_t>(x.shape(axis)), 1};
    for (int i = 0; i < axis; ++i)
        v.outer *= static_cast<std::int64_t>(x.shape(i));
    for (std::size_t i = axis + 1; i < x.ndim(); ++i)
        v.inner *= static_cast<std::int64_t>(x.shape(i));
    quant::require(scale.ndim() == 1 && static_cast<std::int64_t>(scale.shape(0)) == v.channels &&
                       quant::contiguous(scale),
                   kPerChannel,
                   "scale must be a contiguous (" + std::to_string(v.channels) +
                       ",) array, got shape " + quant::shape_of(scale));
    return v;
}

template <class X, class S, class O>
kernels::Int8PerChannelArgs per_channel_args(const X &x, const O &out, const S &scale, int axis,
                                             bool dynamic) {
    const ChannelView v = channel_view(x, scale, axis);
    quant::require_contiguous(out, kPerChannel, "out");
    quant::require_same_shape(out, "out", x, "x", kPerChannel);
    return {x.data(), out.data(), scale.data(), v.outer, v.channels, v.inner, dynamic};
}

template <class G, class X, class S, class O>
kernels::Int8PerChannelBackwardArgs per_channel_backward_args(const G &grad, const X &x,
                                                              const S &scale, const O &grad_x,
                                                              int axis) {
    const ChannelView v = channel_view(x, scale, axis);
    quant::require_contiguous(grad, kPerChannel, "grad");
    quant::require_contiguous(grad_x, kPerChannel, "grad_x");
    quant::require_same_shape(grad, "grad", x, "x", kPerChannel);
    quant::require_same_shape(grad_x, "grad_x", x, "x", kPerChannel);
    return {grad.data(), x.data(), scale.data(), grad_x.data(), v.outer, v.channels, v.inner};
}

template <class R>
void require_range(const R &lo, const R &hi) {
    quant::require(lo.size() == 1 && hi.size() == 1, kAffine,
                   "lo and hi must have one element each, got shapes " + quant::shape_of(lo) +
                       " and " + quant::shape_of(hi));
}

template <class X, class R, class O>
kernels::Int8AffineArgs affine_args(const X &x, const O &out, const R &lo, const R &hi) {
    require_range(lo, hi);
    quant::require_contiguous(x, kAffine, "x");
    quant::require_contiguous(out, kAffine, "out");
    quant::require_same_shape(out, "out", x, "x", kAffine);
    return {x.data(), out.data(), quant::numel(x), lo.data(), hi.data()};
}

template <class G, class X, class R, class O>
kernels::Int8AffineBackwardArgs affine_backward_args(const G &grad, const X &x, const R &lo,
                                                     const R &hi, const O &grad_x) {
    require_range(lo, hi);
    quant::require_contiguous(grad, kAffine, "grad");
    quant::require_contiguous(x, kAffine, "x");
    quant::require_contiguous(grad_x, kAffine, "grad_x");
    quant::require_same_shape(grad, "grad", x, "x", kAffine);
    quant::require_same_shape(grad_x, "grad_x", x, "x", kAffine);
    return {grad.data(), x.data(), grad_x.data(), quant::numel(x), lo.data(), hi.data()};
}

void per_channel_cpu(const CpuIn &x, const CpuOut &out, const CpuOut &scale, int axis,
                     bool dynamic, int max_threads) {
    const auto args = per_channel_args(x, out, scale, axis, dynamic);
    nb::gil_scoped_release released;
    kernels::fake_quant_int8_per_channel_cpu(args, max_threads);
}

void per_channel_backward_cpu(const CpuIn &grad, const CpuIn &x, const CpuIn &scale,
                              const CpuOut &grad_x, int axis, int max_threads) {
    const auto args = per_channel_backward_args(grad, x, scale, grad_x, axis);
    nb::gil_scoped_release released;
    kernels::fake_quant_int8_per_channel_backward_cpu(args, max_threads);
}

void affine_cpu(const CpuIn &x, const CpuOut &out, const CpuIn &lo, const CpuIn &hi,
                int max_threads) {
    const auto args = affine_args(x, out, lo, hi);
    nb::gil_scoped_release released;
    kernels::fake_quant_int8_affine_cpu(args, max_threads);
}

void affine_backward_cpu(const CpuIn &grad, const CpuIn &x, const CpuIn &lo, const CpuIn &hi,
                         const CpuOut &grad_x, int max_threads) {
    const auto args = affine_backward_args(grad, x, lo, hi, grad_x);
    nb::gil_scoped_release released;
    kernels::fake_quant_int8_affine_backward_cpu(args, max_threads);
}

#ifdef TPA_WITH_CUDA

void per_channel_cuda(const CudaIn &x, const CudaOut &out, const CudaOut &scale, int axis,
                      bool dynamic, std::uintptr_t stream) {
    quant::require(quant::on_one_device(x, out, scale), kPerChannel,
                   "x, out and scale must be on the same CUDA device");
    quant::launch(kernels::fake_quant_int8_per_channel_cuda,
                  per_channel_args(x, out, scale, axis, dynamic), x.device_id(), stream,
                  kPerChannel);
}

void per_channel_backward_cuda(const CudaIn &grad, const CudaIn &x, const CudaIn &scale,
                               const CudaOut &grad_x, int axis, std::uintptr_t stream) {
    quant::require(quant::on_one_device(grad, x, scale, grad_x), kPerChannel,
                   "grad, x, scale and grad_x must be on the same CUDA device");
    quant::launch(kernels::fake_quant_int8_per_channel_backward_cuda,
                  per_channel_backward_args(grad, x, scale, grad_x, axis), x.device_id(), stream,
                  kPerChannel);
}

void affine_cuda(const CudaIn &x, const CudaOut &out, const CudaIn &lo, const CudaIn &hi,
                 std::uintptr_t stream) {
    quant::require(quant::on_one_device(x, out, lo, hi), kAffine,
                   "x, out, lo and hi must be on the same CUDA device");
    quant::launch(kernels::fake_quant_int8_affine_cuda, affine_args(x, out, lo, hi),
                  x.device_id(), stream, kAffine);
}

void affine_backward_cuda(const CudaIn &grad, const CudaIn &x, const CudaIn &lo,
                          const CudaIn &hi, const CudaOut &grad_x, std::uintptr_t stream) {
    quant::require(quant::on_one_device(grad, x, lo, hi, grad_x), kAffine,
                   "grad, x, lo, hi and grad_x must be on the same CUDA device");
    quant::launch(kernels::fake_quant_int8_affine_backward_cuda,
                  affine_backward_args(grad, x, lo, hi, grad_x), x.device_id(), stream, kAffine);
}
#endif

}  // namespace

void bind_fake_quant_int8(nb::module_ &m) {
    m.def("fake_quant_int8_per_channel_cpu", &per_channel_cpu, nb::arg("x").noconvert(),
          nb::arg("out").noconvert(), nb::arg("scale").noconvert(), nb::arg("channel_axis"),
          nb::arg("dynamic"), nb::arg("max_threads") = 0,
          "torch.fake_quantize_per_channel_affine(x, scale, 0, axis, -128, 127) of contiguous "
          "float32 CPU arrays; `dynamic` first writes scale = max(amax / 127, 1e-12).");
    m.def("fake_quant_int8_per_channel_backward_cpu", &per_channel_backward_cpu,
          nb::arg("grad").noconvert(), nb::arg("x").noconvert(), nb::arg("scale").noconvert(),
          nb::arg("grad_x").noconvert(), nb::arg("channel_axis"), nb::arg("max_threads") = 0,
          "grad_x = grad * (torch's mask of the per-channel forward).");
    m.def("fake_quant_int8_affine_cpu", &affine_cpu, nb::arg("x").noconvert(),
          nb::arg("out").noconvert(), nb::arg("lo").noconvert(), nb::arg("hi").noconvert(),
          nb::arg("max_threads") = 0,
          "LibreYOLO's fake_quant_int8_affine(x, lo, hi) of contiguous float32 CPU arrays.");
    m.def("fake_quant_int8_affine_backward_cpu", &affine_backward_cpu,
          nb::arg("grad").noconvert(), nb::arg("x").noconvert(), nb::arg("lo").noconvert(),
          nb::arg("hi").noconvert(), nb::arg("grad_x").noconvert(), nb::arg("max_threads") = 0,
          "grad_x = grad * (torch's mask of the affine forward).");
    m.def("int8_affine_zero_point", &kernels::int8_affine_zero_point, nb::arg("lo"),
          nb::arg("hi"), nb::arg("cuda_rules"),
          "The zero point LibreYOLO's int8_act_qparams gives [lo, hi] by the CPU's or CUDA's "
          "rules.");
#ifdef TPA_WITH_CUDA
    m.def("fake_quant_int8_per_channel_cuda", &per_channel_cuda, nb::arg("x").noconvert(),
          nb::arg("out").noconvert(), nb::arg("scale").noconvert(), nb::arg("channel_axis"),
          nb::arg("dynamic"), nb::arg("stream"), "As the CPU kernel, on `stream`.");
    m.def("fake_quant_int8_per_channel_backward_cuda", &per_channel_backward_cuda,
          nb::arg("grad").noconvert(), nb::arg("x").noconvert(), nb::arg("scale").noconvert(),
          nb::arg("grad_x").noconvert(), nb::arg("channel_axis"), nb::arg("stream"),
          "As the CPU kernel, on `stream`.");
    m.def("fake_quant_int8_affine_cuda", &affine_cuda, nb::arg("x").noconvert(),
          nb::arg("out").noconvert(), nb::arg("lo").noconvert(), nb::arg("hi").noconvert(),
          nb::arg("stream"), "As the CPU kernel, on `stream` (lo and hi in device memory).");
    m.def("fake_quant_int8_affine_backward_cuda", &affine_backward_cuda,
          nb::arg("grad").noconvert(), nb::arg("x").noconvert(), nb::arg("lo").noconvert(),
          nb::arg("hi").noconvert(), nb::arg("grad_x").noconvert(), nb::arg("stream"),
          "As the CPU kernel, on `stream`.");
#endif
}

}  // namespace turbo_physai::bindings
