// csrc/kernels/fake_quant_fp4/fake_quant_fp4.cu: MXFP4/NVFP4 on CUDA, a few lanes per block.
#include "fake_quant_fp4/e2m1.h"
#include "fake_quant_fp4/fake_quant_fp4_cuda.h"
#include "quant_math/cuda_launch.cuh"

namespace turbo_physai::kernels {
namespace {

// Each thread holds 4 consecutive elements of a block, so B / 4 neighbouring lanes share one
// (16-byte loads across the warp: coalesced); they reduce its amax with shuffles.
template <int B>
struct BlockLanes {
    static constexpr int kLanes = B / quant::kPerThread;
    std::int64_t rows, cols, blocks;  // blocks a row

    BlockLanes(std::int64_t rows_, std::int64_t cols_)
        : rows(rows_), cols(cols_), blocks((cols_ + B - 1) / B) {}

    /// Thread blocks of quant::kThreads covering every lane.
    unsigned grid() const {
        return static_cast<unsigned>((rows * blocks * kLanes + quant::kThreads - 1) /
                                     quant::kThreads);
    }

    __device__ bool locate(std::int64_t thread, std::int64_t &block, std::int64_t &col) const {
        block = thread / kLanes;
        col = (block % blocks) * B + (thread % kLanes) * quant::kPerThread;
        return block < rows * blocks;
    }
};

// max |x| of a whole tensor: per-thread maxima, then one unsigned atomicMax of the bit
// patterns (magnitudes order like their bits; a NaN, above Inf, wins as torch's amax lets it).
__global__ void tensor_amax_kernel(const float *x, std::int64_t n, unsigned *amax_bits) {
    unsigned m = 0;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        m = max(m, __float_as_uint(x[i]) & 0x7FFFFFFFu);
    for (int offset = 16; offset > 0; offset /= 2)
        m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
    if (threadIdx.x % 32 == 0)
        atomicMax(amax_bits, m);
}

struct Scales {
    Fp4Format format;
    const float *tensor_amax;  // NV only

    __device__ float operator()(float amax) const {
        if (format == Fp4Format::mx)
            return fp4::mx_block_scale_cuda(amax);
        const float ts = fp4::nv_tensor_scale_cuda(*tensor_amax);
        return fp4::nv_block_scale(amax, ts, __fmul_rn(ts, 6.0f));
    }
};

__device__ inline void load4(const float *p, std::int64_t col, std::int64_t cols, bool vector,
                             float v[4]) {
    if (vector) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        return;
    }
    for (int k = 0; k < 4; ++k)
        v[k] = col + k < cols ? p[k] : 0.0f;  // the reference pads short blocks with zeros
}

__device__ inline void store4(float *p, std::int64_t col, std::int64_t cols, bool vector,
                              const float v[4]) {
    if (vector) {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
        return;
    }
    for (int k = 0; k < 4 && col + k < cols; ++k)
        p[k] = v[k];
}

template <int B>
__global__ void fake_quant_fp4_kernel(Fp4Args a, BlockLanes<B> lanes, Scales scales, bool vector) {
    const std::int64_t thread = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    std::int64_t block, col;
    const bool live = lanes.locate(thread, block, col);  // whole warps stay for the shuffles
    const std::int64_t at = (live ? block / lanes.blocks : 0) * a.cols + col;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live && col < a.cols)
        load4(a.x + at, col, a.cols, vector, v);
    unsigned m = 0;
    for (float e : v)
        m = max(m, __float_as_uint(e) & 0x7FFFFFFFu);
    for (int offset = BlockLanes<B>::kLanes / 2; offset > 0; offset /= 2)
        m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (!live)
        return;
    const float eff = scales(__uint_as_float(m));
    if (thread % BlockLanes<B>::kLanes == 0)
        a.block_scales[block] = eff;
    if (col >= a.cols)
        return;
    for (float &e : v)
        e = fp4::fake_quant_e2m1(e, eff);
    store4(a.out + at, col, a.cols, vector, v);
}

template <int B>
__global__ void backward_kernel(Fp4BackwardArgs a, BlockLanes<B> lanes, bool vector) {
    const std::int64_t thread = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    std::int64_t block, col;
    if (!lanes.locate(thread, block, col) || col >= a.cols)
        return;
    const std::int64_t at = (block / lanes.blocks) * a.cols + col;
    const float eff = a.block_scales[block];
    float g[4];
    load4(a.grad + at, col, a.cols, vector, g);
    for (float &e : g)
        e = __fdiv_rn(__fmul_rn(e, eff), eff);
    store4(a.grad_x + at, col, a.cols, vector, g);
}

// One thread a payload byte: two codes, low nibble first.
__global__ void unpack_nvfp4_kernel(UnpackNvfp4Args a, std::int64_t bytes_a_row) {
    const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= a.rows * bytes_a_row)
        return;
    const std::int64_t r = i / bytes_a_row, j = i - r * bytes_a_row, col = 2 * j;
    const float ts = fp4::nv_tensor_scale_cuda(*a.tensor_amax);
    const float stored = a.block_scale[r * a.block_row_stride + (col / 16) * a.block_stride];
    const float eff = quant::clamp_min(__fmul_rn(stored, ts), fp4::kEps);
    const unsigned byte = a.payload[r * a.payload_row_stride + j];
    for (int k = 0; k < 2 && col + k < a.width; ++k) {
        const unsigned code = (byte >> (4 * k)) & 0xFu;
        const int index = static_cast<int>(code & 7u);
        const float level = index < 4 ? 0.5f * static_cast<float>(index)
                                      : (index == 7 ? 6.0f : static_cast<float>(index - 2));
        a.out[r * a.width + col + k] = __fmul_rn((code & 8u) ? -level : level, eff);
    }
}

}  // namespace

cudaError_t fake_quant_fp4_cuda(const Fp4Args &a, cudaStream_t stream) {
    if (a.rows <= 0 || a.cols <= 0)
        return cudaSuccess;
    Scales scales{a.format, a.tensor_amax};
    if (a.format == Fp4Format::nv && !a.tensor_amax) {
        const std::int64_t n = a.rows * a.cols;
        tensor_amax_kernel<<<quant::blocks_for(n), quant::kThreads, 0, stream>>>(
            a.x, n, reinterpret_cast<unsigned *>(a.amax_scratch));
        scales.tensor_amax = a.amax_scratch;
    }
    const bool vector = a.cols % 4 == 0 && quant::aligned16(a.x) && quant::aligned16(a.out);
    if (a.format == Fp4Format::mx) {
        const BlockLanes<32> lanes(a.rows, a.cols);
        fake_quant_fp4_kernel<<<lanes.grid(), quant::kThreads, 0, stream>>>(a, lanes, scales,
                                                                           vector);
    } else {
        const BlockLanes<16> lanes(a.rows, a.cols);
        fake_quant_fp4_kernel<<<lanes.grid(), quant::kThreads, 0, stream>>>(a, lanes, scales,
                                                                           vector);
    }
    return cudaGetLastError();
}

cudaError_t fake_quant_fp4_backward_cuda(const Fp4BackwardArgs &a, cudaStream_t stream) {
    if (a.rows <= 0 || a.cols <= 0)
        return cudaSuccess;
    const bool vector = a.cols % 4 == 0 && quant::aligned16(a.grad) && quant::aligned16(a.grad_x);
    if (a.block == 32) {
        const BlockLanes<32> lanes(a.rows, a.cols);
        backward_kernel<<<lanes.grid(), quant::kThreads, 0, stream>>>(a, lanes, vector);
    } else {
        const BlockLanes<16> lanes(a.rows, a.cols);
        backward_kernel<<<lanes.grid(), quant::kThreads, 0, stream>>>(a, lanes, vector);
    }
    return cudaGetLastError();
}

cudaError_t unpack_nvfp4_cuda(const UnpackNvfp4Args &a, cudaStream_t stream) {
    if (a.rows <= 0 || a.width <= 0)
        return cudaSuccess;
    const std::int64_t bytes_a_row = (a.width + 1) / 2;
    const std::int64_t n = a.rows * bytes_a_row;
    unpack_nvfp4_kernel<<<static_cast<unsigned>((n + quant::kThreads - 1) / quant::kThreads),
                          quant::kThreads, 0, stream>>>(a, bytes_a_row);
    return cudaGetLastError();
}

}  // namespace turbo_physai::kernels
