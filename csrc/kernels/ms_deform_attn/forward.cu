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

constexpr size_t kTablesBytes = warp_tables_bytes<Point>();

/// Adds the points of `table[j]`, j = first, first + step, ... < count, on this lane's VEC channels
/// of `column` (value[n, :, m, c:c+VEC], rows `row_bytes` apart).
template <typename T, int VEC>
__device__ inline void gather(const Point *table, int first, int step, int count, const T *column,
                              unsigned row_bytes, float (&acc)[VEC]) {
    for (int j = first; j < count; j += step) {
        const Point pt = table[j];  // the lanes of a group read one entry: a broadcast
        if (pt.row[0] < 0)
            continue;
        // ptxas starts on the first row before requesting the other three; a software-pipelined
        // variant (the next point's rows requested first) measured 5-10% slower on the H200.
        float v[4][VEC];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            load<T, VEC>(row_at(column, pt.row[k], row_bytes), v[k]);
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                acc[i] += pt.weight[k] * v[k][i];
    }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs<T> a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x / 32;
    Point *table = reinterpret_cast<Point *>(smem) + warp * 32;
    Level *levels = level_table(smem, kTablesBytes);
    load_levels(a.s, levels);
    __syncthreads();
    const int lane = threadIdx.x & 31, r = lane & (a.layout.lanes_per_row - 1);
    const int group = lane >> a.layout.log2_lanes, groups = 32 >> a.layout.log2_lanes;
    const int points = a.s.levels * a.s.points;
    const int first_level = lane < points ? lane / a.s.points : 0;  // of this lane's first point
    const unsigned row_bytes = static_cast<unsigned>(a.s.heads * a.s.channels * sizeof(T));
    const std::int64_t D = a.s.channels;
    for (std::int64_t nm = blockIdx.y; nm < a.s.batch * a.s.heads; nm += gridDim.y) {
        const Head h(nm, a.s.heads);
        const T *head = a.value + (h.n * a.s.value_len * a.s.heads + h.m) * D;  // value[n,0,m,0]
        for (std::int64_t q = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
             q < a.s.queries; q += static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock) {
            const std::int64_t row = h.row(q, a.s);
            for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
                const std::int64_t c =
                    (static_cast<std::int64_t>(chunk) * a.layout.lanes_per_row + r) * VEC;
                const bool active = c < D;
                float acc[VEC] = {};
                for (int base = 0; base < points; base += 32) {
                    const int count = min(32, points - base);
                    if (chunk == 0 || points > 32) {  // else the table still holds these points
                        __syncwarp();  // every lane is done reading the previous table
                        if (lane < count) {
                            Point pt;
                            PointGrad pg;
                            const int level = base ? (base + lane) / a.s.points : first_level;
                            prepare_point(a.loc, a.attn, row, points, base + lane, level, levels,
                                          pt, pg);
#pragma unroll
                            for (int k = 0; k < 4; ++k)
                                pt.weight[k] *= pg.attn;
                            table[lane] = pt;
                        }
                        __syncwarp();
                    }
                    if (active)
                        gather<T, VEC>(table, group, groups, count, head + c, row_bytes, acc);
                }
                // Groups hold partial sums over different points; add them in a fixed butterfly.
                for (int offset = a.layout.lanes_per_row; offset < 32; offset <<= 1)
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        acc[i] += __shfl_xor_sync(kFullMask, acc[i], offset);
                if (group == 0 && active)
                    store<T, VEC>(a.out + row * D + c, acc);
            }
        }
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
    if (p.batch * p.queries * p.heads == 0 || p.channels == 0)
        return cudaSuccess;
    const size_t smem = kTablesBytes + sizeof(Level) * static_cast<size_t>(p.levels);
    if (wide)
        forward_kernel<T, kVec><<<grid_for(p), kThreads, smem, stream>>>(a);
    else
        forward_kernel<T, 1><<<grid_for(p), kThreads, smem, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace

cudaError_t forward(const Problem &p, const void *value, const void *sampling_locations,
                    const void *attention_weights, void *output, cudaStream_t stream) {
    if (!fits_int_indexing(p))
        return cudaErrorInvalidValue;
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
