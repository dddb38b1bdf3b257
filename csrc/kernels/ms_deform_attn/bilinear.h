// csrc/kernels/ms_deform_attn/bilinear.h: bilinear corners of one sampling point, and channel loops.
#pragma once

#include <cmath>
#include <cstdint>

namespace turbo_physai::kernels::msda::detail {

/// The in-bounds corners of one sampling point (0 to 4), with their bilinear weights and the
/// derivatives of those weights with respect to the pixel coordinates x and y.
template <typename T>
struct Corners {
    int count = 0;
    std::int64_t row[4];  ///< y * W + x within the level
    T weight[4], d_dx[4], d_dy[4];
};

/// grid_sample(align_corners=False, padding_mode="zeros"): pixel coordinate loc*size-0.5, corners
/// outside the map read as zero. Points with x <= -1, x >= W (likewise y) touch no corner.
template <typename T>
inline void corners_of(T loc_x, T loc_y, std::int64_t height, std::int64_t width, Corners<T> &c) {
    c.count = 0;
    const T x = loc_x * static_cast<T>(width) - T(0.5);
    const T y = loc_y * static_cast<T>(height) - T(0.5);
    // Written so that NaN fails it too: the casts below are only defined for in-range values.
    if (!(x > T(-1) && y > T(-1) && x < static_cast<T>(width) && y < static_cast<T>(height)))
        return;
    const T x0f = std::floor(x), y0f = std::floor(y);
    const auto x0 = static_cast<std::int64_t>(x0f), y0 = static_cast<std::int64_t>(y0f);
    const T fx = x - x0f, fy = y - y0f, gx = T(1) - fx, gy = T(1) - fy;
    const auto add = [&](std::int64_t yy, std::int64_t xx, T w, T dx, T dy) {
        if (yy < 0 || xx < 0 || yy >= height || xx >= width)
            return;
        c.row[c.count] = yy * width + xx;
        c.weight[c.count] = w;
        c.d_dx[c.count] = dx;
        c.d_dy[c.count] = dy;
        ++c.count;
    };
    add(y0, x0, gy * gx, -gy, -gx);
    add(y0, x0 + 1, gy * fx, gy, -fx);
    add(y0 + 1, x0, fy * gx, -fy, gx);
    add(y0 + 1, x0 + 1, fy * fx, fy, fx);
}

/// out += sum over corners of w[i] * v[i]; one pass over `out` when all four corners are in.
template <typename T>
inline void accumulate(T *__restrict out, const T *const v[4], const T w[4], int count,
                       std::int64_t channels) {
    if (count == 4) {
        const T *__restrict v0 = v[0], *__restrict v1 = v[1], *__restrict v2 = v[2],
                            *__restrict v3 = v[3];
        const T w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3];
#pragma omp simd
        for (std::int64_t d = 0; d < channels; ++d)
            out[d] += w0 * v0[d] + w1 * v1[d] + w2 * v2[d] + w3 * v3[d];
        return;
    }
    for (int i = 0; i < count; ++i) {
        const T *__restrict vi = v[i];
        const T wi = w[i];
#pragma omp simd
        for (std::int64_t d = 0; d < channels; ++d)
            out[d] += wi * vi[d];
    }
}

/// Returns dot(g, v) and does grad_v += scale * g in the same pass over the channels.
template <typename T>
inline T dot_and_scatter(const T *__restrict g, const T *__restrict v, T *__restrict grad_v,
                         T scale, std::int64_t channels) {
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t d = 0; d < channels; ++d) {
        dot += g[d] * v[d];
        grad_v[d] += scale * g[d];
    }
    return dot;
}

}  // namespace turbo_physai::kernels::msda::detail
