// csrc/kernels/ms_deform_attn/forward.cu: MSDA forward on CUDA, one warp per (n, q, m) row.
#include "ms_deform_attn/cuda_common.cuh"

namespace turbo_physai::kernels::msda::cuda {
namespace {

using namespace detail;

template <typename T>
struct ForwardArgs {
    Shape s;
    Layout layout;
    const T *value, *loc, *attn;
    T *out;
};

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs<T> a) {
    extern __shared__ Level levels[];
    load_levels(a.s, levels);
    __syncthreads();
    const int lane = threadIdx.x & 31, r = lane & (a.layout.lanes_per_row - 1);
    const int group = lane >> a.layout.log2_lanes, groups = 32 >> a.layout.log2_lanes;
    const int points = a.s.levels * a.s.points;
    const std::int64_t M = a.s.heads, D = a.s.channels, rows = a.s.batch * a.s.queries * M;
    const std::int64_t items = rows * a.layout.chunks;
    for (std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
         item < items; item += static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock) {
        const std::int64_t row = item / a.layout.chunks;  // (n * Lq + q) * M + m
        const std::int64_t c = (item % a.layout.chunks * a.layout.lanes_per_row + r) * VEC;
        const std::int64_t n = row / (a.s.queries * M), m = row % M;
        const bool active = c < D;
        // value[n, :, m, c:c+VEC] with rows M*D apart.
        const T *column = a.value + (n * a.s.value_len * M + m) * D + (active ? c : 0);
        float acc[VEC] = {};
        for (int base = 0; base < points; base += 32) {
            const PointBatch<T> batch(a.loc + row * points * 2, a.attn + row * points, base, points);
            const int count = min(32, points - base);
            for (int j0 = 0; j0 < count; j0 += groups) {
                const int j = j0 + group;
                const float px = __shfl_sync(kFullMask, batch.x, j & 31);
                const float py = __shfl_sync(kFullMask, batch.y, j & 31);
                const float pw = __shfl_sync(kFullMask, batch.weight, j & 31);
                if (j >= count || !active)
                    continue;
                const Taps t = taps_of<false>(px, py, levels[(base + j) / a.s.points]);
                if (!t.any)
                    continue;
                float v[4][VEC];  // all four loads issued before the first use
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    load<T, VEC>(column + t.row[k] * M * D, v[k]);
#pragma unroll
                for (int k = 0; k < 4; ++k)
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        acc[i] += pw * t.weight[k] * v[k][i];
            }
        }
        // Groups hold partial sums over different points; add them in a fixed butterfly order.
        for (int offset = a.layout.lanes_per_row; offset < 32; offset <<= 1)
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                acc[i] += __shfl_xor_sync(kFullMask, acc[i], offset);
        if (group == 0 && active)
            store<T, VEC>(a.out + row * D + c, acc);
    }
}

template <typename T>
cudaError_t launch(const Problem &p, const void *value, const void *loc, const void *attn,
                   void *out, cudaStream_t stream) {
    constexpr int kVec = 16 / sizeof(T);
    const bool wide = p.channels % kVec == 0 && aligned16(value) && aligned16(out);
    ForwardArgs<T> a{shape_of(p), layout_for(p.channels, wide ? kVec : 1),
                     static_cast<const T *>(value), static_cast<const T *>(loc),
                     static_cast<const T *>(attn), static_cast<T *>(out)};
    const std::int64_t items = p.batch * p.queries * p.heads * a.layout.chunks;
    if (items == 0 || p.channels == 0)
        return cudaSuccess;
    const size_t smem = sizeof(Level) * static_cast<size_t>(p.levels);
    if (wide)
        forward_kernel<T, kVec><<<blocks_for(items), kThreads, smem, stream>>>(a);
    else
        forward_kernel<T, 1><<<blocks_for(items), kThreads, smem, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace

cudaError_t forward(const Problem &p, const void *value, const void *sampling_locations,
                    const void *attention_weights, void *output, cudaStream_t stream) {
    switch (p.dtype) {
    case Dtype::float16:
        return launch<__half>(p, value, sampling_locations, attention_weights, output, stream);
    case Dtype::bfloat16:
        return launch<__nv_bfloat16>(p, value, sampling_locations, attention_weights, output,
                                     stream);
    default:
        return launch<float>(p, value, sampling_locations, attention_weights, output, stream);
    }
}

}  // namespace turbo_physai::kernels::msda::cuda
