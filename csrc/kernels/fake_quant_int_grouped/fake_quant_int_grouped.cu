// csrc/kernels/fake_quant_int_grouped/fake_quant_int_grouped.cu: grouped ints on CUDA, a warp a group.
#include "fake_quant_int_grouped/fake_quant_int_grouped_cuda.h"
#include "quant_math/cuda_launch.cuh"
#include "quant_math/torch_float.h"

namespace turbo_physai::kernels {
namespace {

constexpr float kEps = 1e-12f;
constexpr int kWarps = quant::kThreads / 32;

// Warp w of the grid quantizes group w: its lanes stride over the group's elements (consecutive
// lanes, consecutive columns), reduce the amax with shuffles, then quantize.
__global__ void fake_quant_kernel(IntGroupedArgs a, std::int64_t groups, float qmin, float qmax) {
    const std::int64_t group = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (group >= a.rows * groups)
        return;  // whole warps: the shuffles below see all 32 lanes
    const std::int64_t r = group / groups, g = group - r * groups, c0 = g * a.group_size;
    const std::int64_t n = min(a.group_size, a.cols - c0);
    const float *w = a.w + r * a.w_row_stride + c0;
    float *out = a.out + r * a.cols + c0;
    float s;
    if (a.scale) {
        s = quant::clamp_min(a.scale[r * a.scale_row_stride + g * a.scale_group_stride], kEps);
    } else {
        unsigned m = 0;
        for (std::int64_t i = lane; i < n; i += 32)
            m = max(m, __float_as_uint(w[i]) & 0x7FFFFFFFu);
        for (int offset = 16; offset > 0; offset /= 2)
            m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
        s = quant::clamp_min(__fmul_rn(__uint_as_float(m), 1.0f / qmax), kEps);
    }
    for (std::int64_t i = lane; i < n; i += 32) {
        const float code = quant::clamp(rintf(__fdiv_rn(w[i], s)), qmin, qmax);
        out[i] = quant::straight_through(__fmul_rn(code, s), w[i]);
    }
}

// One thread a payload byte: its 8 / bits codes, lowest bits first.
__global__ void unpack_kernel(UnpackIntGroupedArgs a, std::int64_t bytes_a_row) {
    const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= a.rows * bytes_a_row)
        return;
    const std::int64_t r = i / bytes_a_row, j = i - r * bytes_a_row;
    const int per_byte = 8 / a.bits;
    const unsigned mask = (1u << a.bits) - 1u;
    const float qmin = -static_cast<float>(1 << (a.bits - 1));
    const unsigned byte = a.payload[r * a.payload_row_stride + j];
    for (int k = 0; k < per_byte; ++k) {
        const std::int64_t col = j * per_byte + k;
        if (col >= a.width)
            return;
        const std::int64_t g = col / a.group_size;
        const float s =
            quant::clamp_min(a.scale[r * a.scale_row_stride + g * a.scale_group_stride], kEps);
        const float q = __fadd_rn(static_cast<float>((byte >> (k * a.bits)) & mask), qmin);
        a.out[r * a.width + col] = __fmul_rn(q, s);
    }
}

}  // namespace

cudaError_t fake_quant_int_grouped_cuda(const IntGroupedArgs &a, cudaStream_t stream) {
    if (a.rows <= 0 || a.cols <= 0)
        return cudaSuccess;
    const std::int64_t groups = (a.cols + a.group_size - 1) / a.group_size;
    const std::int64_t half = std::int64_t{1} << (a.bits - 1);
    const std::int64_t blocks = (a.rows * groups + kWarps - 1) / kWarps;
    fake_quant_kernel<<<static_cast<unsigned>(blocks), quant::kThreads, 0, stream>>>(
        a, groups, static_cast<float>(-half), static_cast<float>(half - 1));
    return cudaGetLastError();
}

cudaError_t unpack_int_grouped_cuda(const UnpackIntGroupedArgs &a, cudaStream_t stream) {
    if (a.rows <= 0 || a.width <= 0)
        return cudaSuccess;
    const int per_byte = 8 / a.bits;
    const std::int64_t bytes_a_row = (a.width + per_byte - 1) / per_byte;
    const std::int64_t n = a.rows * bytes_a_row;
    unpack_kernel<<<static_cast<unsigned>((n + quant::kThreads - 1) / quant::kThreads),
                    quant::kThreads, 0, stream>>>(a, bytes_a_row);
    return cudaGetLastError();
}

}  // namespace turbo_physai::kernels
