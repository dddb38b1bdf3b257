// csrc/kernels/fake_quant_int8/fake_quant_int8.cu: int8 fake quantization on CUDA (torch's CUDA rules).
#include "fake_quant_int8/fake_quant_int8_cuda.h"
#include "fake_quant_int8/int8_rounding.h"
#include "quant_math/cuda_launch.cuh"

namespace turbo_physai::kernels {
namespace {

constexpr int kReduceThreads = 256;

// Channel c's largest |x| (NaN if any is NaN), one block a channel, then its scale.
__global__ void channel_scales_kernel(const float *x, float *scale, std::int64_t outer,
                                      std::int64_t channels, std::int64_t inner) {
    const std::int64_t c = blockIdx.x;
    const std::int64_t n = outer * inner;
    float m = 0.0f;
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        const std::int64_t o = k / inner, j = k - o * inner;
        m = quant::max_keep_nan(m, fabsf(x[(o * channels + c) * inner + j]));
    }
    for (int offset = 16; offset > 0; offset /= 2)
        m = quant::max_keep_nan(m, __shfl_down_sync(0xffffffffu, m, offset));
    __shared__ float warps[kReduceThreads / 32];
    if (threadIdx.x % 32 == 0)
        warps[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kReduceThreads / 32; ++w)
            m = quant::max_keep_nan(m, warps[w]);
        scale[c] = int8::per_channel_scale_cuda(m);
    }
}

struct ChannelOf {
    const float *scale;
    std::int64_t channels, inner;
    __device__ float operator()(std::int64_t i) const { return scale[(i / inner) % channels]; }
};

__global__ void per_channel_kernel(Int8PerChannelArgs a, bool vector) {
    const std::int64_t total = a.outer * a.channels * a.inner;
    const ChannelOf scale_of{a.scale, a.channels, a.inner};
    const auto quantize = [](float x, float s) {
        return __fmul_rn(int8::per_channel_code_cuda(x, __fdiv_rn(1.0f, s)).value, s);
    };
    for (std::int64_t i = quant::first_of_group(); i < total; i += quant::group_stride())
        quant::map4(a.x, a.out, i, total, vector, scale_of, quantize);
}

__global__ void per_channel_backward_kernel(Int8PerChannelBackwardArgs a, bool vector) {
    const std::int64_t total = a.outer * a.channels * a.inner;
    const ChannelOf scale_of{a.scale, a.channels, a.inner};
    const auto masked = [](float g, float x, float s) {
        return __fmul_rn(g, int8::per_channel_code_cuda(x, __fdiv_rn(1.0f, s)).inside ? 1.0f : 0.0f);
    };
    for (std::int64_t i = quant::first_of_group(); i < total; i += quant::group_stride())
        quant::map4_pair(a.grad, a.x, a.grad_x, i, total, vector, scale_of, masked);
}

struct Affine {
    int8::AffineParams p;
    float inv;
};

__device__ Affine affine_of(const float *lo, const float *hi) {
    const int8::AffineParams p = int8::affine_params_cuda(*lo, *hi);
    return {p, __fdiv_rn(1.0f, p.scale)};
}

__global__ void affine_kernel(Int8AffineArgs a, bool vector) {
    const Affine q = affine_of(a.lo, a.hi);
    const auto same = [&q](std::int64_t) { return q; };
    const auto quantize = [](float x, const Affine &q) {
        return int8::affine_value_cuda(x, q.p, q.inv).value;
    };
    for (std::int64_t i = quant::first_of_group(); i < a.n; i += quant::group_stride())
        quant::map4(a.x, a.out, i, a.n, vector, same, quantize);
}

__global__ void affine_backward_kernel(Int8AffineBackwardArgs a, bool vector) {
    const Affine q = affine_of(a.lo, a.hi);
    const auto same = [&q](std::int64_t) { return q; };
    const auto masked = [](float g, float x, const Affine &q) {
        return __fmul_rn(g, int8::affine_value_cuda(x, q.p, q.inv).inside ? 1.0f : 0.0f);
    };
    for (std::int64_t i = quant::first_of_group(); i < a.n; i += quant::group_stride())
        quant::map4_pair(a.grad, a.x, a.grad_x, i, a.n, vector, same, masked);
}

// Groups of 4 share a channel where each channel's runs are whole groups.
bool vector_channels(std::int64_t inner, std::initializer_list<const void *> pointers) {
    if (inner % quant::kPerThread != 0)
        return false;
    for (const void *p : pointers)
        if (!quant::aligned16(p))
            return false;
    return true;
}

}  // namespace

cudaError_t fake_quant_int8_per_channel_cuda(const Int8PerChannelArgs &a, cudaStream_t stream) {
    const std::int64_t total = a.outer * a.channels * a.inner;
    if (total == 0)
        return cudaSuccess;
    if (a.dynamic) {
        channel_scales_kernel<<<static_cast<unsigned>(a.channels), kReduceThreads, 0, stream>>>(
            a.x, a.scale, a.outer, a.channels, a.inner);
    }
    per_channel_kernel<<<quant::blocks_for(total), quant::kThreads, 0, stream>>>(
        a, vector_channels(a.inner, {a.x, a.out}));
    return cudaGetLastError();
}

cudaError_t fake_quant_int8_per_channel_backward_cuda(const Int8PerChannelBackwardArgs &a,
                                                      cudaStream_t stream) {
    const std::int64_t total = a.outer * a.channels * a.inner;
    if (total == 0)
        return cudaSuccess;
    per_channel_backward_kernel<<<quant::blocks_for(total), quant::kThreads, 0, stream>>>(
        a, vector_channels(a.inner, {a.grad, a.x, a.grad_x}));
    return cudaGetLastError();
}

cudaError_t fake_quant_int8_affine_cuda(const Int8AffineArgs &a, cudaStream_t stream) {
    if (a.n == 0)
        return cudaSuccess;
    affine_kernel<<<quant::blocks_for(a.n), quant::kThreads, 0, stream>>>(
        a, quant::aligned16(a.x) && quant::aligned16(a.out));
    return cudaGetLastError();
}

cudaError_t fake_quant_int8_affine_backward_cuda(const Int8AffineBackwardArgs &a,
                                                 cudaStream_t stream) {
    if (a.n == 0)
        return cudaSuccess;
    affine_backward_kernel<<<quant::blocks_for(a.n), quant::kThreads, 0, stream>>>(
        a, quant::aligned16(a.grad) && quant::aligned16(a.x) && quant::aligned16(a.grad_x));
    return cudaGetLastError();
}

}  // namespace turbo_physai::kernels
