// csrc/bindings/fake_quant_fp8.cpp: nb::ndarray front of the fake_quant_fp8 CPU and CUDA kernels.
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "fake_quant_fp8/fake_quant_fp8.h"
#include "quant_arrays.h"
#ifdef TPA_WITH_CUDA
#include "fake_quant_fp8/fake_quant_fp8_cuda.h"
#endif

namespace turbo_physai::bindings {
namespace {

using namespace quant;  // CpuIn, CudaOut, ... (quant_arrays.h)

using kernels::FakeQuantFp8Args;
constexpr const char *kOp = "fake_quant_fp8";

// Rows of x are dim 0; everything behind it must be one contiguous run of `cols` elements.
template <class Array>
std::int64_t row_stride(const Array &a, const char *what, std::int64_t &cols) {
    cols = 1;
    for (std::size_t i = a.ndim(); i-- > 1;) {
        quant::require(a.shape(i) == 1 || a.stride(i) == cols, kOp,
                       std::string(what) + " must be contiguous behind dim 0");
        cols *= static_cast<std::int64_t>(a.shape(i));
    }
    return a.ndim() ? a.stride(0) : 0;
}

// `rows` < 0: rows are x's dim 0 (contiguous behind it, each row `x.stride(0)` apart); else x
// and out are contiguous and viewed as `rows` rows of numel / rows.
template <class In, class Out>
FakeQuantFp8Args describe(const In &x, const In &scale, const Out &out, std::int64_t rows,
                          bool straight_through) {
    FakeQuantFp8Args a{};
    a.x = x.data();
    a.scale = scale.data();
    a.out = out.data();
    a.straight_through = straight_through;
    quant::require_same_shape(out, "out", x, "x", kOp);
    if (rows < 0) {
        std::int64_t out_cols = 0;
        a.rows = x.ndim() ? static_cast<std::int64_t>(x.shape(0)) : 1;
        a.x_row_stride = row_stride(x, "x", a.cols);
        a.out_row_stride = row_stride(out, "out", out_cols);
    } else {
        const std::int64_t n = quant::numel(x);
        quant::require(rows > 0 ? n % rows == 0 : n == 0, kOp,
                       std::to_string(rows) + " rows do not divide x with shape " +
                           quant::shape_of(x));
        quant::require_contiguous(x, kOp, "x");
        quant::require_contiguous(out, kOp, "out");
        a.rows = rows;
        a.cols = rows ? n / rows : 0;
        a.x_row_stride = a.out_row_stride = a.cols;
    }
    if (scale.size() == 1) {
        a.scale_stride = 0;
    } else if (rows < 0) {
        quant::require(
            scale.ndim() == 1 && static_cast<std::int64_t>(scale.shape(0)) == a.rows, kOp,
            "scale must have 1 element (per-tensor) or shape (" + std::to_string(a.rows) +
                ",) (per-channel along dim 0 of x), got " + quant::shape_of(scale));
        a.scale_stride = scale.stride(0);
    } else {
        quant::require(static_cast<std::int64_t>(scale.size()) == a.rows &&
                           quant::contiguous(scale),
                       kOp,
                       "scale must have 1 element or one for each of the " +
                           std::to_string(a.rows) + " rows, contiguous, got " +
                           quant::shape_of(scale));
        a.scale_stride = 1;
    }
    return a;
}

void run_cpu(const CpuIn &x, const CpuIn &scale, const CpuOut &out, bool straight_through,
             std::int64_t rows, int max_threads) {
    const FakeQuantFp8Args args = describe(x, scale, out, rows, straight_through);
    nb::gil_scoped_release released;
    kernels::fake_quant_fp8_cpu(args, max_threads);
}

#ifdef TPA_WITH_CUDA

void run_cuda(const CudaIn &x, const CudaIn &scale, const CudaOut &out, bool straight_through,
              std::int64_t rows, std::uintptr_t stream) {
    quant::require(quant::on_one_device(x, scale, out), kOp,
                   "x, scale and out must be on the same CUDA device");
    const FakeQuantFp8Args args = describe(x, scale, out, rows, straight_through);
    quant::require(args.rows <= 1 || (args.x_row_stride == args.cols &&
                                      args.out_row_stride == args.cols),
                   kOp, "on CUDA, x and out must be contiguous");
    quant::launch(kernels::fake_quant_fp8_cuda, args, x.device_id(), stream, kOp);
}
#endif

}  // namespace

void bind_fake_quant_fp8(nb::module_ &m) {
    // noconvert: an implicit dtype/device conversion would write `out` into a temporary copy.
    m.def("fake_quant_fp8_cpu", &run_cpu, nb::arg("x").noconvert(), nb::arg("scale").noconvert(),
          nb::arg("out").noconvert(), nb::arg("straight_through") = false,
          nb::arg("rows") = -1, nb::arg("max_threads") = 0,
          "out = fp8_e4m3fn(clamp(x / s, +-448)) * s, s = max(scale, 1e-12) of the row; with "
          "straight_through, x + (that - x). float32, CPU. Rows: x's dim 0, or `rows` of a "
          "contiguous x.");
#ifdef TPA_WITH_CUDA
    m.def("fake_quant_fp8_cuda", &run_cuda, nb::arg("x").noconvert(),
          nb::arg("scale").noconvert(), nb::arg("out").noconvert(), nb::arg("straight_through"),
          nb::arg("rows"), nb::arg("stream"),
          "As fake_quant_fp8_cpu on CUDA memory, enqueued on `stream`.");
    m.attr("cuda_kernels") = true;
#else
    m.attr("cuda_kernels") = false;
#endif
}

}  // namespace turbo_physai::bindings
