// csrc/kernels/ms_deform_attn/forward.cu: MSDA forward on CUDA, a warp per (n, q, m) rows.
#include "ms_deform_attn/cuda_common.cuh"

namespace turbo_physai::kernels::msda::cuda {
namespace {

using namespace detail;

/// V: value's element type; P: that of the locations, weights and output (V, or float).
template <typename V, typename P>
struct ForwardArgs {
    Shape s;
    Layout layout;
    const V *value;
    const P *loc, *attn;
    P *out;
};

constexpr size_t kTablesBytes = warp_tables_bytes<Point>();

/// A table entry with a non-finite location or weight (prepared by `unusual_entry`): NaN, or +Inf
/// times the bilinear sum of its corners. Off the common path: only such points come here.
template <typename T, int VEC>
__device__ inline void gather_unusual(Point pt, const T *column, unsigned row_bytes,
                                            float (&acc)[VEC]) {
    if (pt.row[0] == kNaNRow) {
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            acc[i] += __int_as_float(0x7fc00000);
        return;
    }
    pt.row[0] = kScaledRow - pt.row[0];
    float sum[VEC] = {};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float v[VEC];
        load<T, VEC>(row_at(column, pt.row[k], row_bytes), v);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            sum[i] += pt.weight[k] * v[i];
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i)
        acc[i] += __int_as_float(0x7f800000) * sum[i];
}

/// The table entry of a point with a non-finite weight `attn` or location (kNaNRow already):
/// NaN * S and +-Inf * 0 sample NaN; +-Inf with corners in the map is scaled (kScaledRow).
__device__ inline void unusual_entry(Point &pt, float attn) {
    if (pt.row[0] < 0 || isnan(attn)) {
        pt.row[0] = kNaNRow;
        return;
    }
    pt.row[0] = kScaledRow - pt.row[0];
#pragma unroll
    for (int k = 0; k < 4; ++k)
        pt.weight[k] = attn > 0.f ? pt.weight[k] : -pt.weight[k];
}

/// Adds the points of `table[j]`, j = first, first + step, ... < count, on this lane's VEC channels
/// of `column` (value[n, :, m, c:c+VEC], rows `row_bytes` apart).
template <typename T, int VEC>
__device__ inline void gather(const Point *table, int first, int step, int count, const T *column,
                              unsigned row_bytes, float (&acc)[VEC]) {
    bool unusual = false;
    for (int j = first; j < count; j += step) {
        const Point pt = table[j];  // the lanes of a group read one entry: a broadcast
        if (pt.row[0] < 0) {
            unusual |= pt.row[0] != kOutsideRow;
            continue;
        }
        // ptxas starts on the first row before requesting the other three; a software-pipelined
        // variant (the next point's rows requested first) measured 5-10% slower on the H200, and
        // so did this loop unrolled 2 or 4 times (with or without the branch; 0.31 vs 0.27 ms
        // GPU time on the encoder shape).
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
    // Points with a non-finite location or weight, in a pass of their own so that the loop above
    // stays as it was (registers, no spills) for finite points.
    if (unusual)
        for (int j = first; j < count; j += step)
            if (table[j].row[0] < kOutsideRow)
                gather_unusual<T, VEC>(table[j], column, row_bytes, acc);
}

/// A warp computes `rows_per_warp` consecutive queries of one head: lane l prepares point
/// l mod L*P of row l / (L*P) (with more than 32 points, one row and 32 points at a time); the
/// groups of R lanes split between the rows, each group gathering every G-th point of its row.
template <typename V, typename P, int VEC>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardArgs<V, P> a) {
    extern __shared__ __align__(16) unsigned char smem[];
    Point *table = reinterpret_cast<Point *>(smem) + threadIdx.x / 32 * 32;
    Level *levels = level_table(smem, kTablesBytes);
    load_levels(a.s, levels);
    __syncthreads();
    const Layout &lay = a.layout;
    const Lanes ln(lay, a.s);
    const int points = a.s.levels * a.s.points;
    const unsigned row_bytes = static_cast<unsigned>(a.s.heads * a.s.channels * sizeof(V));
    const std::int64_t D = a.s.channels;
    for (std::int64_t nm = blockIdx.y; nm < a.s.batch * a.s.heads; nm += gridDim.y) {
        const Head h(nm, a.s.heads);
        const V *head = a.value + (h.n * a.s.value_len * a.s.heads + h.m) * D;  // value[n,0,m,0]
        for (std::int64_t q0 = first_query(lay); q0 < a.s.queries; q0 += query_step(lay)) {
            const bool own_valid = q0 + ln.own < a.s.queries;
            const std::int64_t row = h.row(q0 + ln.own, a.s);
            for (int chunk = 0; chunk < lay.chunks; ++chunk) {
                const std::int64_t c =
                    (static_cast<std::int64_t>(chunk) * lay.lanes_per_row + ln.r) * VEC;
                const bool active = c < D && own_valid;
                float acc[VEC] = {};
                for (int base = 0; base < points; base += 32) {
                    if (chunk == 0 || points > 32) {  // else the table still holds these points
                        __syncwarp();  // every lane is done reading the previous table
                        if (ln.prepares(lay, a.s, base, q0)) {
                            Point pt;
                            PointGrad pg;
                            prepare_point(a.loc, a.attn, h.row(q0 + ln.prep_row, a.s), points,
                                          base + ln.prep_k, ln.level(a.s, base), levels, pt, pg);
                            if (pt.row[0] < kOutsideRow || !isfinite(pg.attn)) {
                                unusual_entry(pt, pg.attn);
                            } else {
#pragma unroll
                                for (int k = 0; k < 4; ++k)
                                    pt.weight[k] *= pg.attn;
                            }
                            table[ln.lane] = pt;
                        }
                        __syncwarp();
                    }
                    if (active)
                        gather<V, VEC>(table + ln.own * points, ln.sub, 1 << ln.log2_groups,
                                       min(32, points - base), head + c, row_bytes, acc);
                }
                // A row's groups hold partial sums over different points; add them in a fixed
                // butterfly.
                for (int offset = lay.lanes_per_row;
                     offset < (lay.lanes_per_row << ln.log2_groups); offset <<= 1)
#pragma unroll
                    for (int i = 0; i < VEC; ++i)
                        acc[i] += __shfl_xor_sync(kFullMask, acc[i], offset);
                if (ln.sub == 0 && active)
                    store<P, VEC>(a.out + row * D + c, acc);
            }
        }
    }
}

template <typename V, typename P>
cudaError_t launch(const Problem &p, const void *value, const void *loc, const void *attn,
                   void *out, cudaStream_t stream) {
    // 16-byte loads: with 16-bit types that is 8 channels per lane (4 lanes per row of D = 32);
    // 8-byte loads for those measured no faster (the backward is another matter).
    constexpr int kVec = 16 / sizeof(V);
    const bool wide = p.channels % kVec == 0 && aligned(value, 16) && aligned(out, 16);
    ForwardArgs<V, P> a{shape_of(p), layout_for(p, wide ? kVec : 1),
                        static_cast<const V *>(value), static_cast<const P *>(loc),
                        static_cast<const P *>(attn), static_cast<P *>(out)};
    if (p.batch * p.queries * p.heads == 0 || p.channels == 0)
        return cudaSuccess;
    const size_t smem = kTablesBytes + sizeof(Level) * static_cast<size_t>(p.levels);
    if (wide)
        forward_kernel<V, P, kVec><<<grid_for(p, a.layout), kThreads, smem, stream>>>(a);
    else
        forward_kernel<V, P, 1><<<grid_for(p, a.layout), kThreads, smem, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace

cudaError_t forward(const Problem &p, const void *value, const void *sampling_locations,
                    const void *attention_weights, void *output, cudaStream_t stream) {
    if (!fits_int_indexing(p) || !supported_dtypes(p))
        return cudaErrorInvalidValue;
    return with_types(p, [&](auto value_zero, auto point_zero) {
        return launch<decltype(value_zero), decltype(point_zero)>(
            p, value, sampling_locations, attention_weights, output, stream);
    });
}

}  // namespace turbo_physai::kernels::msda::cuda
