// csrc/kernels/fake_quant_int_grouped/fake_quant_int_grouped.h: grouped W4/W2-style int weights.
#pragma once

#include <cstdint>

namespace turbo_physai::kernels {

/// LibreYOLO's fake_quant_int_grouped: a rows x cols float32 weight (rows `w_row_stride` apart,
/// columns contiguous) in groups of `group_size` columns (the last one may be short), each with
/// a symmetric scale s over [-2^(bits-1), 2^(bits-1) - 1]: `q = clamp(round(w / s)) * s`,
/// written as LibreYOLO's straight-through forward `w + (q - w)` into a contiguous `out`.
/// `scale` null: s = max(amax / qmax, 1e-12) from the group's largest |w|; otherwise group g of
/// row r reads max(scale[r * scale_row_stride + g * scale_group_stride], 1e-12) (strides may
/// be 0: a broadcast scale).
struct IntGroupedArgs {
    const float *w;
    float *out;
    const float *scale;
    std::int64_t scale_row_stride;
    std::int64_t scale_group_stride;
    std::int64_t rows;
    std::int64_t cols;
    std::int64_t w_row_stride;
    std::int64_t group_size;
    int bits;  // 1..16
};

/// LibreYOLO's unpack_int_grouped_weight: `payload` holds rows of `payload_cols` bytes
/// (`payload_row_stride` apart), each byte 8/bits codes, lowest bits first; code k of a row
/// dequantizes to `(k - 2^(bits-1)) * max(scale, 1e-12)` with the scale of its group (as
/// above). The first `width` values of each row go to the contiguous rows x width `out`.
struct UnpackIntGroupedArgs {
    const std::uint8_t *payload;
    std::int64_t payload_row_stride;
    std::int64_t payload_cols;
    const float *scale;
    std::int64_t scale_row_stride;
    std::int64_t scale_group_stride;
    float *out;
    std::int64_t rows;
    std::int64_t width;
    std::int64_t group_size;
    int bits;  // 2 or 4
};

void fake_quant_int_grouped_cpu(const IntGroupedArgs &args, int max_threads);
void unpack_int_grouped_cpu(const UnpackIntGroupedArgs &args, int max_threads);

}  // namespace turbo_physai::kernels
