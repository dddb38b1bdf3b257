// csrc/kernels/fake_quant_fp8/fake_quant_fp8.h: fake_quant_fp8 kernels, framework-free.
#pragma once

#include <cstdint>

namespace turbo_physai::kernels {

/// `x` viewed as `rows` x `cols` float32 with contiguous rows `x_row_stride` elements apart;
/// `out` likewise. `scale_stride` 0 applies scale[0] to every row (per-tensor), otherwise row
/// r uses scale[r * scale_stride] (per-channel, or any scale that is constant along a row).
/// Computes `q = fp8(clamp(x / s, +-448)) * s` with `s = max(scale, 1e-12)`, and with
/// `straight_through` LibreYOLO's forward `x + (q - x)` instead of q.
struct FakeQuantFp8Args {
    const float *x;
    const float *scale;
    float *out;
    std::int64_t rows;
    std::int64_t cols;
    std::int64_t x_row_stride;
    std::int64_t out_row_stride;
    std::int64_t scale_stride;
    bool straight_through;
};

/// On up to `max_threads` threads (<= 0: all); any of rows and cols may be 0.
void fake_quant_fp8_cpu(const FakeQuantFp8Args &args, int max_threads);

}  // namespace turbo_physai::kernels
