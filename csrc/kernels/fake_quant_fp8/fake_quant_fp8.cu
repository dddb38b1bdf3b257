// csrc/kernels/fake_quant_fp8/fake_quant_fp8.cu: fake_quant_fp8 on CUDA, grid-stride over rows x cols.
#include "fake_quant_fp8/fake_quant_fp8_cuda.h"
#include "fake_quant_fp8/fp8_e4m3fn.h"

namespace turbo_physai::kernels {
namespace {

__global__ void fake_quant_fp8_kernel(FakeQuantFp8Args a) {
    const std::int64_t total = a.rows * a.cols;
    const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < total; i += step) {
        const std::int64_t r = i / a.cols, c = i - r * a.cols;
        const float s = fake_quant_fp8_scale(a.scale[r * a.scale_stride]);
        const float x = a.x[r * a.x_row_stride + c];
        const float q = fake_quant_fp8_value(x, s);
        a.out[r * a.out_row_stride + c] = a.straight_through ? quant::straight_through(q, x) : q;
    }
}

}  // namespace

cudaError_t fake_quant_fp8_cuda(const FakeQuantFp8Args &args, cudaStream_t stream) {
    const std::int64_t total = args.rows * args.cols;
    if (args.rows <= 0 || args.cols <= 0)
        return cudaSuccess;
    constexpr int kThreads = 256;
    // Enough blocks to fill any current GPU; the grid-stride loop covers the rest.
    const std::int64_t wanted = (total + kThreads - 1) / kThreads;
    const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
    fake_quant_fp8_kernel<<<blocks, kThreads, 0, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace turbo_physai::kernels
