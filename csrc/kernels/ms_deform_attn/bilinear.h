// csrc/kernels/ms_deform_attn/bilinear.h: bilinear corners of a sampling point, and channel loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace turbo_physai::kernels::msda::detail {

/// Corners::count of a point whose pixel coordinates are not both finite (a NaN or +-Inf location,
/// or one so large that loc * size overflows): grid_sample's bilinear weights are NaN there, so
/// it samples NaN (see unusual.h), where an in-range point outside the map samples 0.
constexpr int kNonFinite = -1;

/// The in-bounds corners of one sampling point (0 to 4): their element offsets in the level, their
/// bilinear weights and, when asked for, the derivatives of those weights with respect to the
/// pixel coordinates x and y.
template <typename T>
struct Corners {
    int count = 0;
    std::int64_t offset[4];  ///< (y * W + x) * row_stride
    T weight[4], d_dx[4], d_dy[4];
};

/// grid_sample(align_corners=False, padding_mode="zeros"): pixel coordinate loc*size-0.5, corners
/// outside the map read as zero. Points with x < -1, x >= W (likewise y) touch no corner. x = -1
/// is kept, as grid_sample keeps it: its in-map corner has weight 0 but a non-zero derivative
/// (the Deformable DETR CUDA kernel drops it, so its location gradient there is 0 instead).
/// The forward skips the derivatives (kDerivatives = false): it is bound by instruction count.
template <bool kDerivatives, typename T>
inline void corners_of(T loc_x, T loc_y, std::int64_t height, std::int64_t width,
                       std::int64_t row_stride, Corners<T> &c) {
    const T x = loc_x * static_cast<T>(width) - T(0.5);
    const T y = loc_y * static_cast<T>(height) - T(0.5);
    // Written so that NaN fails it too: the casts below are only defined for in-range values.
    if (!(x >= T(-1) && y >= T(-1) && x < static_cast<T>(width) && y < static_cast<T>(height))) {
        // Outside the map, or not a number: only this rare branch tells them apart.
        c.count = std::isfinite(x) && std::isfinite(y) ? 0 : kNonFinite;
        return;
    }
    const T x0f = std::floor(x), y0f = std::floor(y);
    const auto x0 = static_cast<std::int64_t>(x0f), y0 = static_cast<std::int64_t>(y0f);
    const T fx = x - x0f, fy = y - y0f, gx = T(1) - fx, gy = T(1) - fy;
    const T weight[4] = {gy * gx, gy * fx, fy * gx, fy * fx};
    const T d_dx[4] = {-gy, gy, -fy, fy}, d_dy[4] = {-gx, -fx, gx, fx};
    const std::int64_t base = (y0 * width + x0) * row_stride, down = width * row_stride;
    const std::int64_t offset[4] = {base, base + row_stride, base + down, base + down + row_stride};
    if (x0 >= 0 && y0 >= 0 && x0 + 1 < width && y0 + 1 < height) {
        // The common case, all four corners inside: no per-corner branches.
        c.count = 4;
        for (int k = 0; k < 4; ++k) {
            c.offset[k] = offset[k];
            c.weight[k] = weight[k];
            if constexpr (kDerivatives)
                c.d_dx[k] = d_dx[k], c.d_dy[k] = d_dy[k];
        }
        return;
    }
    const bool inside[4] = {x0 >= 0 && y0 >= 0, x0 + 1 < width && y0 >= 0,
                            x0 >= 0 && y0 + 1 < height, x0 + 1 < width && y0 + 1 < height};
    c.count = 0;
    for (int k = 0; k < 4; ++k) {
        if (!inside[k])
            continue;
        c.offset[c.count] = offset[k];
        c.weight[c.count] = weight[k];
        if constexpr (kDerivatives)
            c.d_dx[c.count] = d_dx[k], c.d_dy[c.count] = d_dy[k];
        ++c.count;
    }
}

/// Asks for the first and last cache line of a channel row before it is used (the hardware
/// prefetcher follows the lines in between). Sampled rows are scattered over maps of megabytes;
/// requesting a whole batch of them first lets the misses overlap instead of queueing.
template <typename T>
inline void prefetch(const T *row, std::int64_t channels, bool for_write) {
#if defined(__GNUC__)
    if (for_write) {
        __builtin_prefetch(row, 1);
        __builtin_prefetch(row + channels - 1, 1);
    } else {
        __builtin_prefetch(row);
        __builtin_prefetch(row + channels - 1);
    }
#else
    (void)row, (void)channels, (void)for_write;
#endif
}

template <typename T>
void accumulate_unusual(T *out, const T *const v[4], const T w[4], int count,
                        std::int64_t channels);

/// out += sum over corners of w[i] * v[i]; one pass over `out` when all four corners are in. A
/// negative count is a point with a non-finite location or weight (unusual.h).
template <typename T>
inline void accumulate(T *__restrict out, const T *const v[4], const T w[4], int count,
                       std::int64_t channels) {
    if (count == 4) {
        const T *__restrict v0 = v[0], *__restrict v1 = v[1], *__restrict v2 = v[2],
                            *__restrict v3 = v[3];
        const T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
        for (std::int64_t d = 0; d < channels; ++d)
            out[d] += w0 * v0[d] + w1 * v1[d] + w2 * v2[d] + w3 * v3[d];
        return;
    }
    if (count < 0) {  // after the common case: only border points pay this test
        accumulate_unusual(out, v, w, count, channels);
        return;
    }
    for (int i = 0; i < count; ++i)
        for (std::int64_t d = 0; d < channels; ++d)
            out[d] += w[i] * v[i][d];
}

/// Partial sums per lane: independent lanes vectorize without reassociating a float sum (no
/// -ffast-math), and the lanes are then added in a fixed order: dots are reproducible bit for bit.
template <typename T>
constexpr int kLanes = 32 / sizeof(T);

/// dot[i] = <g, v[i]> for K corner rows read side by side (K is fixed so the lanes unroll).
template <int K, typename T>
inline void dots_of(const T *__restrict g, const T *const v[], std::int64_t channels, T dot[]) {
    constexpr int kL = kLanes<T>;
    T acc[K][kL] = {};
    std::int64_t d = 0;
    for (; d + kL <= channels; d += kL)
        for (int i = 0; i < K; ++i)
            for (int j = 0; j < kL; ++j)
                acc[i][j] += g[d + j] * v[i][d + j];
    for (int j = 0; d < channels; ++d, ++j)
        for (int i = 0; i < K; ++i)
            acc[i][j] += g[d] * v[i][d];
    for (int i = 0; i < K; ++i) {
        T s = 0;
        for (int j = 0; j < kL; ++j)
            s += acc[i][j];
        dot[i] = s;
    }
}

/// dot[i] = <g, v[i]> for the `count` in-bounds corners; the same bits whichever branch runs.
template <typename T>
inline void dots(const T *g, const T *const v[4], int count, std::int64_t channels, T dot[4]) {
    if (count == 4)
        return dots_of<4>(g, v, channels, dot);
    for (int i = 0; i < count; ++i)
        dots_of<1>(g, v + i, channels, dot + i);
}

/// grad_v += scale * g over the channels.
template <typename T>
inline void scatter(const T *__restrict g, T *__restrict grad_v, T scale, std::int64_t channels) {
    for (std::int64_t d = 0; d < channels; ++d)
        grad_v[d] += scale * g[d];
}

}  // namespace turbo_physai::kernels::msda::detail
