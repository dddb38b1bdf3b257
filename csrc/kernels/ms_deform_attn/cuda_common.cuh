// csrc/kernels/ms_deform_attn/cuda_common.cuh: pieces shared by the MSDA CUDA forward and backward.
//
// Work layout: one warp per (n, q, m) output row. The warp splits into G groups of R lanes; a
// group works on one sampling point at a time, its R lanes covering VEC channels each, so a value
// row of D = 32 float32 is 8 lanes x one 16-byte load (a quarter warp), and four points are in
// flight per warp. Locations and weights of up to 32 points are read once per warp, one point a
// lane, coalesced, and handed to the groups by shuffles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ms_deform_attn/ms_deform_attn_cuda.h"

namespace turbo_physai::kernels::msda::cuda::detail {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

/// A level as the kernels use it; empty (h = w = 0) if spatial_shapes/level_start_index put it
/// anywhere but inside value's S rows.
struct Level {
    std::int64_t start;
    int h, w;
};

/// What the host decides per call: lanes per row (a power of two), channel chunks of R*VEC
/// channels (more than one only when D > 32*VEC).
struct Layout {
    int lanes_per_row, log2_lanes, chunks;
};

/// Arguments common to both kernels; `Problem`'s sizes with the device pointers typed later.
struct Shape {
    std::int64_t batch, value_len, heads, channels, queries;
    int levels, points;
    const std::int64_t *spatial_shapes, *level_start_index;
};

inline Shape shape_of(const Problem &p) {
    return {p.batch,
            p.value_len,
            p.heads,
            p.channels,
            p.queries,
            static_cast<int>(p.levels),
            static_cast<int>(p.points),
            p.spatial_shapes,
            p.level_start_index};
}

/// Copies the level table into shared memory (dynamic, `levels` entries); call before a barrier.
__device__ inline void load_levels(const Shape &s, Level *table) {
    for (int l = threadIdx.x; l < s.levels; l += blockDim.x) {
        const std::int64_t h = s.spatial_shapes[2 * l], w = s.spatial_shapes[2 * l + 1];
        const std::int64_t start = s.level_start_index[l], room = s.value_len - start;
        const bool fits = h > 0 && w > 0 && h <= INT32_MAX && w <= INT32_MAX && start >= 0 &&
                          room >= 0 && h <= room / w;
        table[l] = fits ? Level{start, static_cast<int>(h), static_cast<int>(w)} : Level{0, 0, 0};
    }
}

template <typename T>
__device__ inline float to_float(T v) {
    if constexpr (std::is_same_v<T, __half>)
        return __half2float(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __bfloat162float(v);
    else
        return v;
}

template <typename T>
__device__ inline T from_float(float v) {
    if constexpr (std::is_same_v<T, __half>)
        return __float2half_rn(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16_rn(v);
    else
        return v;
}

/// VEC elements from `p` as floats: one 16-byte load when VEC elements make 16 bytes (the host
/// picks VEC = 1 unless D and every pointer allow that).
template <typename T, int VEC>
__device__ inline void load(const T *p, float (&out)[VEC]) {
    if constexpr (VEC * sizeof(T) == 16) {
        const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(p));
        const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            out[i] = to_float(e[i]);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            out[i] = to_float(__ldg(p + i));
    }
}

template <typename T, int VEC>
__device__ inline void store(T *p, const float (&in)[VEC]) {
    if constexpr (VEC * sizeof(T) == 16) {
        uint4 raw;
        T *e = reinterpret_cast<T *>(&raw);
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            e[i] = from_float<T>(in[i]);
        *reinterpret_cast<uint4 *>(p) = raw;
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i)
            p[i] = from_float<T>(in[i]);
    }
}

/// The four bilinear corners of one point in a level, grid_sample(align_corners=False, zeros):
/// pixel coordinate loc*size-0.5; x = -1 is kept as grid_sample keeps it (its in-map corner has
/// weight 0 but a non-zero derivative). Corners outside the map get weight 0, derivative 0, and
/// an address clamped into the map, so the forward can load all four without branches (the
/// clamped row is a neighbour's, already in cache).
struct Taps {
    bool any;                 ///< false: the point touches no corner
    bool inside[4];
    std::int64_t row[4];      ///< row of value's S dimension
    float weight[4], d_dx[4], d_dy[4];
};

template <bool kDerivatives>
__device__ inline Taps taps_of(float loc_x, float loc_y, const Level &lv) {
    Taps t;
    const float x = loc_x * static_cast<float>(lv.w) - 0.5f;
    const float y = loc_y * static_cast<float>(lv.h) - 0.5f;
    // Written so that NaN fails it too. An empty level (w = h = 0) needs its own test: x = -0.5
    // passes x < w there, and its clamped corner rows would lie before the level.
    t.any = lv.w > 0 && lv.h > 0 && x >= -1.f && y >= -1.f && x < static_cast<float>(lv.w) &&
            y < static_cast<float>(lv.h);
    if (!t.any)
        return t;
    const float x0f = floorf(x), y0f = floorf(y);
    const int x0 = static_cast<int>(x0f), y0 = static_cast<int>(y0f);
    const float fx = x - x0f, fy = y - y0f, gx = 1.f - fx, gy = 1.f - fy;
    const float weight[4] = {gy * gx, gy * fx, fy * gx, fy * fx};
    const float d_dx[4] = {-gy, gy, -fy, fy}, d_dy[4] = {-gx, -fx, gx, fx};
    const bool x_in[2] = {x0 >= 0, x0 + 1 < lv.w}, y_in[2] = {y0 >= 0, y0 + 1 < lv.h};
    const int xs[2] = {max(x0, 0), min(x0 + 1, lv.w - 1)};
    const int ys[2] = {max(y0, 0), min(y0 + 1, lv.h - 1)};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int i = k & 1, j = k >> 1;
        t.inside[k] = x_in[i] && y_in[j];
        t.row[k] = lv.start + static_cast<std::int64_t>(ys[j]) * lv.w + xs[i];
        t.weight[k] = t.inside[k] ? weight[k] : 0.f;
        if constexpr (kDerivatives) {
            t.d_dx[k] = t.inside[k] ? d_dx[k] : 0.f;
            t.d_dy[k] = t.inside[k] ? d_dy[k] : 0.f;
        }
    }
    return t;
}

/// The sampling points of one warp row, 32 at a time: lane i holds point base+i.
template <typename T>
struct PointBatch {
    float x = 0.f, y = 0.f, weight = 0.f;

    __device__ PointBatch(const T *loc, const T *attn, int base, int count) {
        const int k = base + static_cast<int>(threadIdx.x & 31);
        if (k < count) {
            x = to_float(loc[2 * k]);
            y = to_float(loc[2 * k + 1]);
            weight = to_float(attn[k]);
        }
    }
};

inline int blocks_for(std::int64_t warps) {
    const std::int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
    return static_cast<int>(blocks < (1 << 30) ? blocks : (1 << 30));  // grid-stride covers more
}

/// R lanes per value row for VEC channels per lane, and how many R*VEC chunks cover D.
inline Layout layout_for(std::int64_t channels, int vec) {
    const std::int64_t lanes_needed = (channels + vec - 1) / vec;
    int log2 = 0;
    while (log2 < 5 && (std::int64_t{1} << log2) < lanes_needed)
        ++log2;
    const std::int64_t per_chunk = (std::int64_t{1} << log2) * vec;
    return {1 << log2, log2, static_cast<int>((channels + per_chunk - 1) / per_chunk)};
}

inline bool aligned16(const void *p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace turbo_physai::kernels::msda::cuda::detail
