// csrc/kernels/ms_deform_attn/unusual.h: sampling points with a non-finite location or weight.
//
// grid_sample's formulation (the slot's reference) defines what they give, and the CPU kernel
// follows it so that the same elements are NaN, forward and backward (issue 24):
//  - a NaN or +-Inf location (Corners::count == kNonFinite) samples NaN: its output row is NaN;
//    it adds nothing to grad_value (no corner lies in the map), its weight gradient is NaN, and
//    its location gradient is NaN in x when y is not finite and sum(0 * a * grad_output) (0, or
//    NaN where a term is not finite) when y is finite: grid_sample multiplies the zero corner
//    differences by the other axis' fractions. Likewise in y.
//  - a NaN or +-Inf attention weight a scales the bilinear sample: a * S, NaN where S = 0
//    (outside the map too), where the kernels' usual a * w_k per corner would give NaN wherever
//    one corner weight is 0; its location gradient sums the channels' terms one by one, as
//    grid_sample's backward does (NaN where their infinities differ in sign).
// Only points that fail the kernels' finite tests come here; the loops over finite points are
// unchanged but for one test per point.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "ms_deform_attn/bilinear.h"

namespace turbo_physai::kernels::msda::detail {

/// Sample::count of a +-Inf weight with n corners in the map: -1 - n (-2 to -5); the sample's
/// weights are then sign(a) * w_k and the row gets +Inf * their sum. kNonFinite: NaN.
constexpr int scaled_count(int corners) { return -1 - corners; }

/// Fills a forward sample (count, value, weight) for a point with a non-finite location or
/// weight `a`; `value_l` is the level's first row.
template <typename T, typename Sample>
inline void unusual_sample(const Corners<T> &c, T a, const T *value_l, Sample &out) {
    if (c.count <= 0 || std::isnan(a)) {  // NaN * S, or +-Inf * 0
        out.count = kNonFinite;
        return;
    }
    out.count = scaled_count(c.count);
    for (int k = 0; k < c.count; ++k) {
        out.value[k] = value_l + c.offset[k];
        out.weight[k] = a > 0 ? c.weight[k] : -c.weight[k];
    }
}

template <typename T>
void accumulate_unusual(T *out, const T *const v[4], const T w[4], int count,
                        std::int64_t channels) {
    if (count == kNonFinite) {
        for (std::int64_t d = 0; d < channels; ++d)
            out[d] += std::numeric_limits<T>::quiet_NaN();
        return;
    }
    const int corners = -1 - count;
    for (std::int64_t d = 0; d < channels; ++d) {
        T s = 0;
        for (int i = 0; i < corners; ++i)
            s += w[i] * v[i][d];
        out[d] += std::numeric_limits<T>::infinity() * s;
    }
}

/// Backward of a point with a non-finite location: writes its location gradient (x at gxy[0],
/// y at gxy[y_stride]) and weight gradient; `g` is its row of grad_output, D > 0 channels.
template <typename T>
inline void nonfinite_location_gradients(T loc_x, T loc_y, std::int64_t height,
                                         std::int64_t width, T a, const T *g, std::int64_t D,
                                         T *gxy, std::int64_t y_stride, T *grad_attn) {
    const T x = loc_x * static_cast<T>(width) - T(0.5);
    const T y = loc_y * static_cast<T>(height) - T(0.5);
    T zero = 0;
    for (std::int64_t d = 0; d < D; ++d)
        zero += T(0) * (a * g[d]);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    gxy[0] = std::isfinite(y) ? zero : nan;
    gxy[y_stride] = std::isfinite(x) ? zero : nan;
    *grad_attn = nan;
}

/// The location gradient of a point with a non-finite weight `a` and at least one corner in the
/// map, summed channel by channel as grid_sample's backward sums it; `value_l`: the level's first
/// row, rows `row_stride` elements apart.
template <typename T>
inline void nonfinite_weight_location_gradient(T loc_x, T loc_y, std::int64_t height,
                                               std::int64_t width, const T *value_l,
                                               std::int64_t row_stride, T a, const T *g,
                                               std::int64_t D, T *gxy, std::int64_t y_stride) {
    const T x = loc_x * static_cast<T>(width) - T(0.5);
    const T y = loc_y * static_cast<T>(height) - T(0.5);
    const T x0f = std::floor(x), y0f = std::floor(y);
    const auto x0 = static_cast<std::int64_t>(x0f), y0 = static_cast<std::int64_t>(y0f);
    const T fx = x - x0f, fy = y - y0f, gx = T(1) - fx, gy = T(1) - fy;
    const T *corner[4];
    for (int k = 0; k < 4; ++k) {
        const std::int64_t cx = x0 + (k & 1), cy = y0 + (k >> 1);
        const bool in = cx >= 0 && cy >= 0 && cx < width && cy < height;
        corner[k] = in ? value_l + (cy * width + cx) * row_stride : nullptr;
    }
    T sx = 0, sy = 0;
    for (std::int64_t d = 0; d < D; ++d) {
        T v[4];
        for (int k = 0; k < 4; ++k)
            v[k] = corner[k] ? corner[k][d] : T(0);
        const T scaled = a * g[d];
        sx += ((v[1] - v[0]) * gy + (v[3] - v[2]) * fy) * scaled;
        sy += ((v[2] - v[0]) * gx + (v[3] - v[1]) * fx) * scaled;
    }
    gxy[0] = sx * static_cast<T>(width);
    gxy[y_stride] = sy * static_cast<T>(height);
}

}  // namespace turbo_physai::kernels::msda::detail
