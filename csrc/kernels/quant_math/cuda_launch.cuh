// csrc/kernels/quant_math/cuda_launch.cuh: launch shapes the elementwise quantization kernels share.
//
// Memory-bound kernels: each thread moves 4 consecutive floats (one 16-byte access where the
// layout allows) per grid-stride step, so a block of 256 threads covers 1024 elements.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace turbo_physai::kernels::quant {

constexpr int kThreads = 256;
constexpr int kPerThread = 4;

/// Blocks for `total` elements: one grid-stride step where that fits in 2^16 blocks (every
/// current GPU is full long before), more steps beyond.
inline unsigned blocks_for(std::int64_t total) {
    const std::int64_t per_block = static_cast<std::int64_t>(kThreads) * kPerThread;
    const std::int64_t wanted = (total + per_block - 1) / per_block;
    return static_cast<unsigned>(wanted < 65536 ? (wanted > 0 ? wanted : 1) : 65536);
}

/// Whether 4 consecutive floats at p can move as one float4.
inline bool aligned16(const void *p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

/// The first element of this thread's current group of 4, and the grid-stride step.
__device__ inline std::int64_t first_of_group() {
    return (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPerThread;
}
__device__ inline std::int64_t group_stride() {
    return static_cast<std::int64_t>(gridDim.x) * blockDim.x * kPerThread;
}

/// out[j] = f(in[j], param(j)) for the 4 elements j = i..i+3: one float4 load and store and
/// one `param` call when `vector` (the caller checked alignment and that the 4 share their
/// param: one row), else element by element up to `total`.
template <class Param, class F>
__device__ inline void map4(const float *in, float *out, std::int64_t i, std::int64_t total,
                            bool vector, Param param, F f) {
    if (vector && i + kPerThread <= total) {
        const auto p = param(i);
        float4 v = *reinterpret_cast<const float4 *>(in + i);
        v = make_float4(f(v.x, p), f(v.y, p), f(v.z, p), f(v.w, p));
        *reinterpret_cast<float4 *>(out + i) = v;
        return;
    }
    for (int k = 0; k < kPerThread && i + k < total; ++k)
        out[i + k] = f(in[i + k], param(i + k));
}

/// out[j] = f(a[j], b[j], param(j)), likewise (gradients: a the incoming gradient, b the input).
template <class Param, class F>
__device__ inline void map4_pair(const float *a, const float *b, float *out, std::int64_t i,
                                 std::int64_t total, bool vector, Param param, F f) {
    if (vector && i + kPerThread <= total) {
        const auto p = param(i);
        const float4 u = *reinterpret_cast<const float4 *>(a + i);
        const float4 v = *reinterpret_cast<const float4 *>(b + i);
        *reinterpret_cast<float4 *>(out + i) =
            make_float4(f(u.x, v.x, p), f(u.y, v.y, p), f(u.z, v.z, p), f(u.w, v.w, p));
        return;
    }
    for (int k = 0; k < kPerThread && i + k < total; ++k)
        out[i + k] = f(a[i + k], b[i + k], param(i + k));
}

}  // namespace turbo_physai::kernels::quant
