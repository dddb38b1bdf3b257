// csrc/kernels/ms_deform_attn/backward.cu: MSDA backward on CUDA, one warp per (n, q, m) row.
//
// Per sampling point a group of lanes reads the four corner rows once and produces all three
// gradients: the dot products of grad_output with the corners give the weight and location
// gradients (reduced over the group's lanes by shuffles, in a fixed order), and the corners'
// value gradients are added with atomics, float (sm_90: one 16-byte red.global.add.v4.f32 per
// lane and corner) or, in the deterministic mode, 64-bit fixed point.
#include "ms_deform_attn/cuda_common.cuh"

namespace turbo_physai::kernels::msda::cuda {
namespace {

using namespace detail;

template <typename T>
struct BackwardArgs {
    Shape s;
    Layout layout;
    const T *value, *loc, *attn, *grad_out;
    void *acc;           ///< float (float atomics) or long long (fixed point), value's shape
    const float *bound;  ///< fixed point only
    T *grad_loc, *grad_attn;
};

/// 2^(62 - e) for bound < 2^e: no sum of terms whose magnitudes add up to at most `bound` can
/// reach 2^62, so the int64 accumulators never overflow. A power of two: scaling is exact.
__device__ inline double fixed_point_scale(const float *bound) {
    const float b = *bound;
    if (!(b > 0.f) || !isfinite(b))
        return 1.0;  // zero gradients (nothing to scale), or non-finite ones (lost either way)
    int e;
    frexpf(b, &e);
    return ldexp(1.0, 62 - e);
}

// float4 atomicAdd (red.global.add.v4.f32) exists from sm_90 on; older targets add one float at a time.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kFloat4Atomics = true;
#else
constexpr bool kFloat4Atomics = false;
#endif

template <bool kFixed, int VEC>
__device__ inline void add_row(void *acc, std::int64_t at, float coef, const float (&g)[VEC],
                               double scale) {
    if constexpr (kFixed) {
        auto *p = static_cast<unsigned long long *>(acc) + at;
#pragma unroll
        for (int i = 0; i < VEC; ++i)  // two's complement: wrapping unsigned adds are signed adds
            atomicAdd(p + i, static_cast<unsigned long long>(
                                 __double2ll_rn(static_cast<double>(coef * g[i]) * scale)));
    } else {
        float *p = static_cast<float *>(acc) + at;
        if constexpr (kFloat4Atomics && VEC % 4 == 0) {
#pragma unroll
            for (int i = 0; i < VEC; i += 4)
                atomicAdd(reinterpret_cast<float4 *>(p + i),
                          make_float4(coef * g[i], coef * g[i + 1], coef * g[i + 2],
                                      coef * g[i + 3]));
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                atomicAdd(p + i, coef * g[i]);
        }
    }
}

template <typename T, int VEC, bool kFixed>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs<T> a) {
    extern __shared__ Level levels[];
    load_levels(a.s, levels);
    __syncthreads();
    const double scale = kFixed ? fixed_point_scale(a.bound) : 1.0;
    const int lane = threadIdx.x & 31, r = lane & (a.layout.lanes_per_row - 1);
    const int group = lane >> a.layout.log2_lanes, groups = 32 >> a.layout.log2_lanes;
    const int points = a.s.levels * a.s.points;
    const std::int64_t M = a.s.heads, D = a.s.channels, rows = a.s.batch * a.s.queries * M;
    const std::int64_t chunk_width = static_cast<std::int64_t>(a.layout.lanes_per_row) * VEC;
    for (std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
         row < rows; row += static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock) {
        const std::int64_t n = row / (a.s.queries * M), m = row % M;
        const std::int64_t column = (n * a.s.value_len * M + m) * D + r * VEC;  // value[n,0,m,r*VEC]
        const T *grad_row = a.grad_out + row * D + r * VEC;
        float g0[VEC] = {};  // the first chunk of grad_output, kept for every point
        if (r * VEC < D)
            load<T, VEC>(grad_row, g0);
        for (int base = 0; base < points; base += 32) {
            const PointBatch<T> batch(a.loc + row * points * 2, a.attn + row * points, base, points);
            const int count = min(32, points - base);
            for (int j0 = 0; j0 < count; j0 += groups) {
                const int j = j0 + group, k = base + j;
                const float px = __shfl_sync(kFullMask, batch.x, j & 31);
                const float py = __shfl_sync(kFullMask, batch.y, j & 31);
                const float pw = __shfl_sync(kFullMask, batch.weight, j & 31);
                const Level lv = levels[(j < count ? k : 0) / max(a.s.points, 1)];
                const Taps t = j < count ? taps_of<true>(px, py, lv) : Taps{false};
                float d_weight = 0.f, d_x = 0.f, d_y = 0.f;
                for (int chunk = 0; t.any && chunk < a.layout.chunks; ++chunk) {
                    const std::int64_t c = chunk * chunk_width;
                    if (c + r * VEC >= D)
                        break;
                    float g[VEC];
                    if (chunk == 0) {
#pragma unroll
                        for (int i = 0; i < VEC; ++i)
                            g[i] = g0[i];
                    } else {
                        load<T, VEC>(grad_row + c, g);
                    }
                    float v[4][VEC];
#pragma unroll
                    for (int q = 0; q < 4; ++q)
                        load<T, VEC>(a.value + column + c + t.row[q] * M * D, v[q]);
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        float dot = 0.f;
#pragma unroll
                        for (int i = 0; i < VEC; ++i)
                            dot += g[i] * v[q][i];
                        d_weight += t.weight[q] * dot;
                        d_x += t.d_dx[q] * dot;
                        d_y += t.d_dy[q] * dot;
                        if (t.inside[q])
                            add_row<kFixed, VEC>(a.acc, column + c + t.row[q] * M * D,
                                                 pw * t.weight[q], g, scale);
                    }
                }
                // Sum the group's lanes (a fixed butterfly: deterministic), then lane 0 writes.
                for (int offset = a.layout.lanes_per_row >> 1; offset > 0; offset >>= 1) {
                    d_weight += __shfl_xor_sync(kFullMask, d_weight, offset);
                    d_x += __shfl_xor_sync(kFullMask, d_x, offset);
                    d_y += __shfl_xor_sync(kFullMask, d_y, offset);
                }
                if (r == 0 && j < count) {
                    const std::int64_t at = row * points + k;
                    a.grad_attn[at] = from_float<T>(d_weight);
                    a.grad_loc[2 * at] = from_float<T>(pw * d_x * static_cast<float>(lv.w));
                    a.grad_loc[2 * at + 1] = from_float<T>(pw * d_y * static_cast<float>(lv.h));
                }
            }
        }
    }
}

/// grad_value = accumulator cast to T (fixed point: divided by the scale first).
template <typename T, bool kFixed>
__global__ void __launch_bounds__(kThreads) finish_kernel(const void *acc, const float *bound,
                                                          T *grad_value, std::int64_t total) {
    const double inverse = kFixed ? 1.0 / fixed_point_scale(bound) : 1.0;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
         i < total; i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
        if constexpr (kFixed)
            grad_value[i] = from_float<T>(static_cast<float>(
                static_cast<double>(static_cast<const long long *>(acc)[i]) * inverse));
        else
            grad_value[i] = from_float<T>(static_cast<const float *>(acc)[i]);
    }
}

template <typename T, bool kFixed>
cudaError_t launch(const Problem &p, BackwardArgs<T> a, bool wide, T *grad_value,
                   cudaStream_t stream) {
    const std::int64_t total = p.batch * p.value_len * p.heads * p.channels;
    const std::int64_t rows = p.batch * p.queries * p.heads;
    const size_t acc_bytes = static_cast<size_t>(total) * (kFixed ? 8 : 4);
    if (total > 0) {
        if (const cudaError_t err = cudaMemsetAsync(a.acc, 0, acc_bytes, stream))
            return err;
    }
    const size_t smem = sizeof(Level) * static_cast<size_t>(p.levels);
    if (rows > 0 && p.channels > 0) {
        if (wide)
            backward_kernel<T, 16 / sizeof(T), kFixed>
                <<<blocks_for(rows), kThreads, smem, stream>>>(a);
        else
            backward_kernel<T, 1, kFixed><<<blocks_for(rows), kThreads, smem, stream>>>(a);
    } else if (rows > 0) {
        // D = 0: no channel to read, but every weight and location gradient is still written.
        const size_t loc_bytes = static_cast<size_t>(rows * p.levels * p.points) * sizeof(T);
        if (const cudaError_t err = cudaMemsetAsync(a.grad_attn, 0, loc_bytes, stream))
            return err;
        if (const cudaError_t err = cudaMemsetAsync(a.grad_loc, 0, 2 * loc_bytes, stream))
            return err;
    }
    if (total > 0 && a.acc != grad_value) {
        const int blocks = blocks_for((total + 31) / 32);
        finish_kernel<T, kFixed><<<blocks, kThreads, 0, stream>>>(a.acc, a.bound, grad_value, total);
    }
    return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch(const Problem &p, const void *value, const void *loc, const void *attn,
                     const void *grad_out, void *grad_value, void *grad_loc, void *grad_attn,
                     const BackwardScratch &scratch, cudaStream_t stream) {
    void *acc = scratch.accumulation == Accumulation::direct ? grad_value : scratch.workspace;
    constexpr int kVec = 16 / sizeof(T);
    const bool wide = p.channels % kVec == 0 && aligned16(value) && aligned16(grad_out) &&
                      aligned16(acc);
    BackwardArgs<T> a{shape_of(p),
                      layout_for(p.channels, wide ? kVec : 1),
                      static_cast<const T *>(value),
                      static_cast<const T *>(loc),
                      static_cast<const T *>(attn),
                      static_cast<const T *>(grad_out),
                      acc,
                      scratch.bound,
                      static_cast<T *>(grad_loc),
                      static_cast<T *>(grad_attn)};
    if (scratch.accumulation == Accumulation::fixed_point)
        return launch<T, true>(p, a, wide, static_cast<T *>(grad_value), stream);
    return launch<T, false>(p, a, wide, static_cast<T *>(grad_value), stream);
}

}  // namespace

cudaError_t backward(const Problem &p, const void *value, const void *sampling_locations,
                     const void *attention_weights, const void *grad_output, void *grad_value,
                     void *grad_sampling_locations, void *grad_attention_weights,
                     const BackwardScratch &scratch, cudaStream_t stream) {
    if (scratch.accumulation == Accumulation::direct && p.dtype != Dtype::float32)
        return cudaErrorInvalidValue;  // float atomics need a float32 target
    const auto run = [&](auto zero) {
        using T = decltype(zero);
        return dispatch<T>(p, value, sampling_locations, attention_weights, grad_output,
                           grad_value, grad_sampling_locations, grad_attention_weights, scratch,
                           stream);
    };
    switch (p.dtype) {
    case Dtype::float16: return run(__half{});
    case Dtype::bfloat16: return run(__nv_bfloat16{});
    default: return run(0.0f);
    }
}

}  // namespace turbo_physai::kernels::msda::cuda
