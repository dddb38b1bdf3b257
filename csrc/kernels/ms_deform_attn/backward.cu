// csrc/kernels/ms_deform_attn/backward.cu: MSDA backward on CUDA, a warp per (n, q, m) rows.
//
// Per sampling point a group of lanes reads the four corner rows once and produces all three
// gradients: the dot products of grad_output with the corners give the weight and location
// gradients (reduced over the group's lanes by shuffles in a fixed order, then written by the lane
// that prepared the point, so those stores are coalesced), and the corners'
// value gradients are added with atomics, float (sm_90: one 16-byte red.global.add.v4.f32 per
// lane and corner) or 64-bit fixed point plus non-finite flags (deterministic), or recorded as
// entries (per corner or per point) that sorted_sums.cu sorts and sums (deterministic, faster).
#include "ms_deform_attn/cuda_common.cuh"
#include "ms_deform_attn/sorted_sums.cuh"

namespace turbo_physai::kernels::msda::cuda {
namespace {

using namespace detail;

/// V: the element type of value and grad_value; P: that of the locations, weights, grad_output
/// and their gradients (V, or float).
template <typename V, typename P>
struct BackwardArgs {
    Shape s;
    Layout layout;
    const V *value;
    const P *loc, *attn, *grad_out;
    void *acc;            ///< float (float atomics) or long long (fixed point), value's shape
    const double *bound;  ///< fixed point only
    unsigned *flags;      ///< fixed point only
    P *grad_loc, *grad_attn;
    SortedScratch sorted;  ///< sorted only
};

/// How grad_value is summed (Accumulation, with the float workspace's atomics as `atomics` and
/// the sorted one by its scheme).
enum class Mode { atomics, fixed_point, corners, anchors };

__host__ __device__ constexpr bool is_sorted(Mode mode) {
    return mode == Mode::corners || mode == Mode::anchors;
}

/// 2^(62 - e) for bound < 2^e: no sum of finite terms whose magnitudes add up to at most `bound`
/// can reach 2^62, so the int64 accumulators never overflow. A power of two: scaling is exact.
__device__ inline double fixed_point_scale(const double *bound) {
    const double b = *bound;
    if (!(b > 0.0) || !isfinite(b))
        return 1.0;  // no finite non-zero term: nothing to scale
    int e;
    frexp(b, &e);
    return ldexp(1.0, 62 - e);
}

/// A non-finite term's bit in its element's 4-bit flags (8 elements per 32-bit word).
constexpr unsigned kPositiveInf = 1, kNegativeInf = 2, kNaN = 4;

/// Where element e's flags lie: word e / 8, from bit `flags_shift(e)`.
__device__ inline unsigned flags_shift(std::int64_t e) { return 4 * static_cast<unsigned>(e % 8); }

// float4 atomicAdd (red.global.add.v4.f32) exists from sm_90 on; older targets add one float at a time.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kFloat4Atomics = true;
#else
constexpr bool kFloat4Atomics = false;
#endif

/// Where the value gradient's terms go: float atomics into float32 sums...
template <Mode kMode>
struct Sums {
    float *sums;

    /// Adds coef * g to the VEC elements from value[n, row, m, c], given the element index
    /// `column` of value[n, 0, m, c] and a value row's `row_elements`.
    template <int VEC>
    __device__ void add(std::int64_t column, int row, unsigned row_elements, float coef,
                        const float (&g)[VEC]) const {
        float *p = row_at(sums + column, row, row_elements * sizeof(float));
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
};

/// ...or, deterministic, fixed-point integer atomics for finite terms and OR-ed flags for the
/// others (an Inf or NaN has no fixed-point value, and must not make the scale unusable).
template <>
struct Sums<Mode::fixed_point> {
    unsigned long long *sums;
    unsigned *flags;
    double scale;

    template <int VEC>
    __device__ void add(std::int64_t column, int row, unsigned row_elements, float coef,
                        const float (&g)[VEC]) const {
        unsigned long long *p = row_at(sums + column, row, row_elements * sizeof(*sums));
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const float term = coef * g[i];
            if (isfinite(term)) {  // two's complement: wrapping unsigned adds are signed adds
                atomicAdd(p + i, static_cast<unsigned long long>(
                                     __double2ll_rn(static_cast<double>(term) * scale)));
            } else {
                const std::int64_t e = (p - sums) + i;
                const unsigned bit =
                    isnan(term) ? kNaN : (term > 0.f ? kPositiveInf : kNegativeInf);
                atomicOr(flags + e / 8, bit << flags_shift(e));
            }
        }
    }
};

/// ...or nothing at once: each point becomes entries of the sorted sums (its preparing lane
/// records them, `record`), which sum_sorted turns into grad_value.
struct Recorded {
    template <int VEC>
    __device__ void add(std::int64_t, int, unsigned, float, const float (&)[VEC]) const {}
};

/// corners: four entries.
template <>
struct Sums<Mode::corners> : Recorded {
    unsigned *keys, *ids;
    float *coef;
    std::int64_t rows;

    /// Point `at` (the index of its weight) of head h: entries 4*at.. in corner order; a corner
    /// outside the map gets the key `rows`, which sorts after every row and is never summed.
    __device__ void record(std::int64_t at, const Point &pt, const PointGrad &pg, const Head &h,
                           const Shape &s, int, int) const {
        unsigned key[4];
        float c[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            key[k] = static_cast<unsigned>(pg.inside >> k & 1u
                                               ? (h.n * s.value_len + pt.row[k]) * s.heads + h.m
                                               : rows);
            c[k] = pg.attn * pt.weight[k];
        }
        const auto first = static_cast<unsigned>(4 * at);
        reinterpret_cast<uint4 *>(keys)[at] = make_uint4(key[0], key[1], key[2], key[3]);
        if (ids)  // the CUB sort's payloads; block sorts need none
            reinterpret_cast<uint4 *>(ids)[at] = make_uint4(first, first + 1, first + 2, first + 3);
        reinterpret_cast<float4 *>(coef)[at] = make_float4(c[0], c[1], c[2], c[3]);
    }
};

/// anchors: one entry per point, keyed by (head, level, its anchor: the top-left corner clamped
/// into the map, pt.row[0]), with the coefficients of the slots anchor, right, below,
/// below-right. A point at x0 = -1 (y0 = -1) has its right (lower) corners in the anchor's slots;
/// the payload's top bits say which slots hold a corner inside the map.
template <>
struct Sums<Mode::anchors> : Recorded {
    unsigned *keys, *ids;
    float *coef;
    std::int64_t none;

    __device__ void record(std::int64_t at, const Point &pt, const PointGrad &pg, const Head &h,
                           const Shape &s, int level, int level_start) const {
        auto key = static_cast<unsigned>(none);
        unsigned slots = 0;
        float c[4] = {};
        if (pt.row[0] >= 0) {
            // Shifted by selects, not by indexing the weights with a computed corner (that puts
            // the point in local memory): x0 = -1 moves the right corners into the left slots,
            // y0 = -1 the lower into the upper.
            const bool dx = !(pg.inside & 0x5u), dy = !(pg.inside & 0x3u);
            const float *w = pt.weight;
            const float sx[4] = {dx ? w[1] : w[0], dx ? 0.f : w[1], dx ? w[3] : w[2],
                                 dx ? 0.f : w[3]};
            const float sxy[4] = {dy ? sx[2] : sx[0], dy ? sx[3] : sx[1], dy ? 0.f : sx[2],
                                  dy ? 0.f : sx[3]};
            slots = dx ? pg.inside >> 1 & 0x5u : pg.inside;
            slots = dy ? slots >> 2 & 0x3u : slots;
#pragma unroll
            for (int k = 0; k < 4; ++k)
                c[k] = pg.attn * sxy[k];
            key = static_cast<unsigned>(anchor_key(h.n * s.heads + h.m, level,
                                                   pt.row[0] - level_start, s.levels,
                                                   s.value_len));
        }
        keys[at] = key;
        ids[at] = static_cast<unsigned>(at) | slots << kSlotShift;
        reinterpret_cast<float4 *>(coef)[at] = make_float4(c[0], c[1], c[2], c[3]);
    }
};

template <Mode kMode, typename Args>
__device__ inline Sums<kMode> make_sums(const Args &a) {
    if constexpr (kMode == Mode::fixed_point)
        return {static_cast<unsigned long long *>(a.acc), a.flags, fixed_point_scale(a.bound)};
    else if constexpr (is_sorted(kMode))
        return {{}, a.sorted.keys, a.sorted.ids, a.sorted.coef, a.sorted.keys_count};
    else
        return {static_cast<float *>(a.acc)};
}

constexpr size_t kTablesBytes = warp_tables_bytes<Point, PointGrad, float4>();

/// Channels per lane when D and the pointers allow vector access: 4 for every type (8-byte loads
/// for 16-bit ones), matching the float4 atomics into the float32 accumulator. 8 channels of a
/// 16-bit type per lane (16-byte loads) needed more registers (2 blocks per SM instead of 3) and
/// made float16/bfloat16 fwd+bwd 1.6-1.7x slower (H200, encoder and BEV shapes).
constexpr int kWide = 4;

/// One point's share of the gradients on this lane's channels (every chunk of them): adds the
/// value gradient of its corners with atomics and returns the lane's parts of d weight, d x, d y.
/// `column`: value[n, 0, m, r*VEC] as an element index (of value and of the accumulator).
template <typename V, typename P, int VEC, Mode kMode>
__device__ inline float3 point_gradients(const BackwardArgs<V, P> &a, const Point &pt,
                                         const PointGrad &pg, std::int64_t column,
                                         unsigned row_elements, const P *grad_row,
                                         const float (&g0)[VEC], int r,
                                         const Sums<kMode> &sums) {
    float d_weight = 0.f, d_x = 0.f, d_y = 0.f;
    const std::int64_t D = a.s.channels;
    const std::int64_t chunk_width = static_cast<std::int64_t>(a.layout.lanes_per_row) * VEC;
    for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
        const std::int64_t c = chunk * chunk_width;
        if (c + r * VEC >= D)
            break;
        float g[VEC];
        if (chunk == 0) {
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                g[i] = g0[i];
        } else {
            load<P, VEC>(grad_row + c, g);
        }
        const V *value = a.value + column + c;
        float v[4][VEC];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            load<V, VEC>(row_at(value, pt.row[k], row_elements * sizeof(V)), v[k]);
        float dot[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            dot[k] = 0.f;
#pragma unroll
            for (int i = 0; i < VEC; ++i)
                dot[k] += g[i] * v[k][i];
            // A corner outside the map read a clamped neighbour's row: it adds nothing, to the
            // value gradient or to any derivative.
            if (pg.inside >> k & 1u)
                sums.template add<VEC>(column + c, pt.row[k], row_elements,
                                       pg.attn * pt.weight[k], g);
            else
                dot[k] = 0.f;
            d_weight += pt.weight[k] * dot[k];
        }
        // Derivatives of the bilinear weights of corners (x0,y0), (x0+1,y0), (x0,y0+1),
        // (x0+1,y0+1) in x and y.
        const float gx = 1.f - pg.fx, gy = 1.f - pg.fy;
        d_x += gy * (dot[1] - dot[0]) + pg.fy * (dot[3] - dot[2]);
        d_y += gx * (dot[2] - dot[0]) + pg.fx * (dot[3] - dot[1]);
    }
    return make_float3(d_weight, d_x, d_y);
}

/// The gradients of a point with a non-finite location (kNaNRow) or a non-finite weight with
/// corners in the map, as grid_sample's formulation gives them (unusual.h): computed by the lane
/// that prepared the point, over all D channels, off the common path (only such points come
/// here). `row`: the point's output row; `d_*`: the common path's values, replaced.
template <typename V, typename P>
__device__ __forceinline__ void unusual_gradients(const BackwardArgs<V, P> &a, const Point &pt,
                                               const PointGrad &pg, const Level &lv,
                                               std::int64_t at, std::int64_t row,
                                               const Head &h, float &d_attn, float &d_x,
                                               float &d_y) {
    const std::int64_t D = a.s.channels;
    const P *g = a.grad_out + row * D;
    if (pt.row[0] == kNaNRow) {
        const float x = to_float(a.loc[2 * at]) * static_cast<float>(lv.w) - 0.5f;
        const float y = to_float(a.loc[2 * at + 1]) * static_cast<float>(lv.h) - 0.5f;
        float zero = 0.f;  // 0, or NaN where some attn * grad_output term is not finite
        for (std::int64_t d = 0; d < D; ++d)
            zero += 0.f * (pg.attn * to_float(g[d]));
        const float nan = __int_as_float(0x7fc00000);
        d_x = isfinite(y) ? zero : nan;
        d_y = isfinite(x) ? zero : nan;
        d_attn = nan;
        return;
    }
    // Channel by channel, as grid_sample sums a +-Inf-scaled location gradient.
    const std::int64_t row_elements = a.s.heads * D;
    const V *column = a.value + (h.n * a.s.value_len * a.s.heads + h.m) * D;
    const float gx = 1.f - pg.fx, gy = 1.f - pg.fy;
    float sx = 0.f, sy = 0.f;
    for (std::int64_t d = 0; d < D; ++d) {
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            v[k] = pg.inside >> k & 1u ? to_float(column[pt.row[k] * row_elements + d]) : 0.f;
        const float scaled = pg.attn * to_float(g[d]);
        sx += ((v[1] - v[0]) * gy + (v[3] - v[2]) * pg.fy) * scaled;
        sy += ((v[2] - v[0]) * gx + (v[3] - v[1]) * pg.fx) * scaled;
    }
    d_x = sx * static_cast<float>(lv.w);
    d_y = sy * static_cast<float>(lv.h);
}

// 3 blocks of 8 warps per SM (at most 80 registers), measured 7-16% faster fwd+bwd in float32
// than the compiler's choice of 2 (H200, issue 6 shapes). Recording sorted entries (no atomics:
// bound by its own issue rate) runs at 4 (64 registers, float32 spills 24-36 bytes): 0.6-3.4%
// faster deterministic fwd+bwd on the encoder, BEV and RT-DETR shapes, 0.6-0.9% slower on the
// small DETR decoder.
template <typename V, typename P, int VEC, Mode kMode>
__global__ void __launch_bounds__(kThreads, is_sorted(kMode) ? 4 : 3)
    backward_kernel(BackwardArgs<V, P> a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x / 32;
    Point *points_of = reinterpret_cast<Point *>(smem) + warp * 32;
    PointGrad *grads_of = reinterpret_cast<PointGrad *>(smem + warp_tables_bytes<Point>()) +
                          warp * 32;
    float4 *totals_of = reinterpret_cast<float4 *>(smem + warp_tables_bytes<Point, PointGrad>()) +
                        warp * 32;
    Level *levels = level_table(smem, kTablesBytes);
    load_levels(a.s, levels);
    __syncthreads();
    const Sums<kMode> sums = make_sums<kMode>(a);
    const Layout &lay = a.layout;
    const Lanes ln(lay, a.s);
    const int points = a.s.levels * a.s.points;
    const unsigned row_elements = static_cast<unsigned>(a.s.heads * a.s.channels);
    const std::int64_t D = a.s.channels;
    for (std::int64_t nm = blockIdx.y; nm < a.s.batch * a.s.heads; nm += gridDim.y) {
        const Head h(nm, a.s.heads);
        const std::int64_t column = (h.n * a.s.value_len * a.s.heads + h.m) * D + ln.r * VEC;
        for (std::int64_t q0 = first_query(lay); q0 < a.s.queries; q0 += query_step(lay)) {
            const bool own_valid = q0 + ln.own < a.s.queries;
            const P *grad_row = a.grad_out + h.row(q0 + ln.own, a.s) * D + ln.r * VEC;
            float g0[VEC] = {};  // the first chunk of grad_output, kept for every point
            if (own_valid && ln.r * VEC < D)
                load<P, VEC>(grad_row, g0);
            for (int base = 0; base < points; base += 32) {
                const int count = min(32, points - base);
                const bool prepares = ln.prepares(lay, a.s, base, q0);
                float scale_x = 0.f, scale_y = 0.f;  // d loc = attn * level size * d pixel
                if (prepares) {
                    Point pt;
                    PointGrad pg;
                    const Level lv =
                        prepare_point(a.loc, a.attn, h.row(q0 + ln.prep_row, a.s), points,
                                      base + ln.prep_k, ln.level(a.s, base), levels, pt, pg);
                    points_of[ln.lane] = pt;
                    grads_of[ln.lane] = pg;
                    if constexpr (is_sorted(kMode))  // (hoisting these indices spills)
                        sums.record(h.row(q0 + ln.prep_row, a.s) * points + base + ln.prep_k, pt,
                                    pg, h, a.s, ln.level(a.s, base), lv.start);
                    scale_x = pg.attn * static_cast<float>(lv.w);
                    scale_y = pg.attn * static_cast<float>(lv.h);
                }
                __syncwarp();
                for (int j0 = 0; j0 < count; j0 += 1 << ln.log2_groups) {
                    const int j = j0 + ln.sub, at = ln.own * points + j;
                    const bool mine = own_valid && j < count;
                    float3 d = make_float3(0.f, 0.f, 0.f);
                    if (mine && points_of[at].row[0] >= 0)
                        d = point_gradients<V, P, VEC, kMode>(a, points_of[at], grads_of[at],
                                                              column, row_elements, grad_row,
                                                              g0, ln.r, sums);
                    // Sum the group's lanes (a fixed butterfly: deterministic); lane 0 posts.
                    for (int offset = lay.lanes_per_row >> 1; offset > 0; offset >>= 1) {
                        d.x += __shfl_xor_sync(kFullMask, d.x, offset);
                        d.y += __shfl_xor_sync(kFullMask, d.y, offset);
                        d.z += __shfl_xor_sync(kFullMask, d.z, offset);
                    }
                    if (ln.r == 0 && mine)
                        totals_of[at] = make_float4(d.x, d.y, d.z, 0.f);
                }
                __syncwarp();
                if (prepares) {  // each lane writes its own point's gradients: coalesced
                    const float4 totals = totals_of[ln.lane];
                    const std::int64_t row = h.row(q0 + ln.prep_row, a.s);
                    const std::int64_t at = row * points + base + ln.prep_k;
                    float d_attn = totals.x, d_x = scale_x * totals.y, d_y = scale_y * totals.z;
                    // Its own table entries, read back (no registers held across the loops).
                    const Point &pt = points_of[ln.lane];
                    const PointGrad &pg = grads_of[ln.lane];
                    if (pt.row[0] == kNaNRow || (pt.row[0] >= 0 && !isfinite(pg.attn)))
                        unusual_gradients(a, pt, pg, levels[ln.level(a.s, base)], at, row, h,
                                          d_attn, d_x, d_y);
                    a.grad_attn[at] = from_float<P>(d_attn);
                    a.grad_loc[2 * at] = from_float<P>(d_x);
                    a.grad_loc[2 * at + 1] = from_float<P>(d_y);
                }
                __syncwarp();  // the tables are rewritten for the next 32 points
            }
        }
    }
}

/// The IEEE sum of an element whose terms included the non-finite ones in `flags` (non-zero).
__device__ inline float non_finite_sum(unsigned flags) {
    const bool nan = (flags & kNaN) || flags == (kPositiveInf | kNegativeInf);
    return nan ? __int_as_float(0x7fc00000) : __int_as_float(flags == kPositiveInf ? 0x7f800000
                                                                                 : 0xff800000);
}

/// grad_value = accumulator cast to T (fixed point: divided by the scale first, unless a flag
/// says the sum is non-finite).
template <typename T, bool kFixed>
__global__ void __launch_bounds__(kThreads)
    finish_kernel(const void *acc, const double *bound, const unsigned *flags, T *grad_value,
                  std::int64_t total) {
    const double inverse = kFixed ? 1.0 / fixed_point_scale(bound) : 1.0;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
         i < total; i += static_cast<std::int64_t>(gridDim.x) * kThreads) {
        if constexpr (kFixed) {
            const unsigned f = flags[i / 8] >> flags_shift(i) & 0xfu;
            grad_value[i] = from_float<T>(
                f ? non_finite_sum(f)
                  : static_cast<float>(
                        static_cast<double>(static_cast<const long long *>(acc)[i]) * inverse));
        } else {
            grad_value[i] = from_float<T>(static_cast<const float *>(acc)[i]);
        }
    }
}

template <typename V, typename P, Mode kMode>
cudaError_t launch(const Problem &p, BackwardArgs<V, P> a, bool wide, V *grad_value,
                   cudaStream_t stream) {
    constexpr bool kFixed = kMode == Mode::fixed_point;
    const std::int64_t total = p.batch * p.value_len * p.heads * p.channels;
    const std::int64_t rows = p.batch * p.queries * p.heads;
    if (total > 0 && !is_sorted(kMode)) {
        const size_t acc_bytes = static_cast<size_t>(total) * (kFixed ? 8 : 4);
        if (const cudaError_t err = cudaMemsetAsync(a.acc, 0, acc_bytes, stream))
            return err;
        if (kFixed) {
            const size_t flag_bytes = static_cast<size_t>((total + 7) / 8) * sizeof(unsigned);
            if (const cudaError_t err = cudaMemsetAsync(a.flags, 0, flag_bytes, stream))
                return err;
        }
    }
    const size_t smem = kTablesBytes + sizeof(Level) * static_cast<size_t>(p.levels);
    if (rows > 0 && p.channels > 0) {
        if (wide)
            backward_kernel<V, P, kWide, kMode>
                <<<grid_for(p, a.layout), kThreads, smem, stream>>>(a);
        else
            backward_kernel<V, P, 1, kMode><<<grid_for(p, a.layout), kThreads, smem, stream>>>(a);
    } else if (rows > 0) {
        // D = 0: no channel to read, but every weight and location gradient is still written.
        const size_t loc_bytes = static_cast<size_t>(rows * p.levels * p.points) * sizeof(P);
        if (const cudaError_t err = cudaMemsetAsync(a.grad_attn, 0, loc_bytes, stream))
            return err;
        if (const cudaError_t err = cudaMemsetAsync(a.grad_loc, 0, 2 * loc_bytes, stream))
            return err;
    }
    if constexpr (is_sorted(kMode)) {
        if (const cudaError_t err = cudaGetLastError())
            return err;
        return sum_sorted(p, a.sorted, a.grad_out, grad_value, stream);
    }
    if (total > 0 && a.acc != grad_value) {
        const int blocks = blocks_for((total + 31) / 32);
        finish_kernel<V, kFixed>
            <<<blocks, kThreads, 0, stream>>>(a.acc, a.bound, a.flags, grad_value, total);
    }
    return cudaGetLastError();
}

template <typename V, typename P>
cudaError_t dispatch(const Problem &p, const void *value, const void *loc, const void *attn,
                     const void *grad_out, void *grad_value, void *grad_loc, void *grad_attn,
                     const BackwardScratch &scratch, cudaStream_t stream) {
    const Accumulation how = scratch.accumulation;
    void *acc = how == Accumulation::direct ? grad_value
              : how == Accumulation::sorted ? nullptr
                                            : scratch.workspace;
    const bool wide = p.channels % kWide == 0 && aligned(value, kWide * sizeof(V)) &&
                      aligned(grad_out, kWide * sizeof(P)) && aligned(acc, 16);
    BackwardArgs<V, P> a{shape_of(p),
                         layout_for(p, wide ? kWide : 1),
                         static_cast<const V *>(value),
                         static_cast<const P *>(loc),
                         static_cast<const P *>(attn),
                         static_cast<const P *>(grad_out),
                         acc,
                         scratch.bound,
                         scratch.flags,
                         static_cast<P *>(grad_loc),
                         static_cast<P *>(grad_attn),
                         {}};
    auto *out = static_cast<V *>(grad_value);
    switch (how) {
    case Accumulation::fixed_point:
        return launch<V, P, Mode::fixed_point>(p, a, wide, out, stream);
    case Accumulation::sorted:
        sorted_layout(p, sorted_scheme(p, scratch.scheme), scratch.workspace, a.sorted);
        if (a.sorted.scheme == SortedScheme::anchors)
            return launch<V, P, Mode::anchors>(p, a, wide, out, stream);
        return launch<V, P, Mode::corners>(p, a, wide, out, stream);
    default: return launch<V, P, Mode::atomics>(p, a, wide, out, stream);
    }
}

}  // namespace

cudaError_t backward(const Problem &p, const void *value, const void *sampling_locations,
                     const void *attention_weights, const void *grad_output, void *grad_value,
                     void *grad_sampling_locations, void *grad_attention_weights,
                     const BackwardScratch &scratch, cudaStream_t stream) {
    if (scratch.accumulation == Accumulation::direct && p.dtype != Dtype::float32)
        return cudaErrorInvalidValue;  // float atomics need a float32 target
    if (!fits_int_indexing(p) || !supported_dtypes(p) ||
        (scratch.accumulation == Accumulation::sorted && !fits_sorted(p, scratch.scheme)))
        return cudaErrorInvalidValue;
    return with_types(p, [&](auto value_zero, auto point_zero) {
        return dispatch<decltype(value_zero), decltype(point_zero)>(
            p, value, sampling_locations, attention_weights, grad_output, grad_value,
            grad_sampling_locations, grad_attention_weights, scratch, stream);
    });
}

}  // namespace turbo_physai::kernels::msda::cuda
