// csrc/kernels/fake_quant_fp4/e2m1.h: FP4 (E2M1) rounding and block scales as LibreYOLO computes them.
#pragma once

#include <cmath>
#include <cstdint>

#include "fake_quant_fp8/fp8_e4m3fn.h"
#include "quant_math/torch_float.h"

namespace turbo_physai::kernels::fp4 {

constexpr float kEps = 1e-12f;

/// The E2M1 magnitude torch.bucketize picks for |y| clamped to 6: the next level above each
/// midpoint, a tie going down (the boundary itself belongs to the lower bucket). Summed from
/// the steps between levels (exact: halves and small integers), which vectorizes.
TPA_HOST_DEVICE inline float e2m1_level(float mag) {
    const auto step = [mag](float midpoint, float rise) { return mag > midpoint ? rise : 0.0f; };
    return step(0.25f, 0.5f) + step(0.75f, 0.5f) + step(1.25f, 0.5f) + step(1.75f, 0.5f) +
           step(2.5f, 1.0f) + step(3.5f, 1.0f) + step(5.0f, 2.0f);
}

/// LibreYOLO's fake_quant_e2m1 forward: `y + (level * sign(y) - y)`. A NaN y picks the top
/// bucket, but torch.sign(NaN) is 0, so the level term is 0 and y itself comes out.
TPA_HOST_DEVICE inline float e2m1_straight_through(float y) {
    const float level = e2m1_level(quant::clamp_max(std::fabs(y), 6.0f));
    return quant::straight_through(quant::mul(level, quant::sign(y)), y);
}

/// One element: `fake_quant_e2m1(x / eff) * eff`.
TPA_HOST_DEVICE inline float fake_quant_e2m1(float x, float eff) {
    return quant::mul_first(e2m1_straight_through(quant::div(x, eff)), eff);
}

/// 2^e for an integral e in [-127, 127] (2^-127 is subnormal); NaN stays NaN.
TPA_HOST_DEVICE inline float exp2_integral(float e) {
    if (quant::is_nan(e))
        return quant::quieted(e);
    const int k = static_cast<int>(e);
    return k >= -126 ? bits_float(static_cast<std::uint32_t>(k + 127) << 23)
                     : bits_float(0x00400000u);
}

/// OCP MX's E8M0 block scale as LibreYOLO's _e8m0_scale computes it:
/// `exp2(clamp(floor(log2(max(amax, 1e-30))) - 2, -127, 127))`, NaN kept. torch's float32
/// log2 rounds to nearest: just below a power of two it can round up to the integer, so the
/// floor is taken of the log2 rounded to float (from double), not of the exponent bits.
inline float mx_block_scale(float amax) {
    const float a = quant::clamp_min(amax, 1e-30f);
    if (quant::is_nan(a))
        return quant::quieted(a);
    const float l = std::floor(static_cast<float>(std::log2(static_cast<double>(a))));
    return exp2_integral(quant::clamp(l - 2.0f, -127.0f, 127.0f));
}

/// NVFP4's effective block scale: the block's scale `amax / (6 * ts)` rounded to E4M3 (clamped
/// to [1e-12, 448]), times the tensor scale ts, at least 1e-12. `six_ts` is `ts * 6`.
TPA_HOST_DEVICE inline float nv_block_scale(float amax, float ts, float six_ts) {
    const float block = fp8_e4m3fn_round(quant::clamp(quant::div(amax, six_ts), kEps, 448.0f));
    return quant::clamp_min(quant::mul_first(block, ts), kEps);
}

/// The tensor scale `max(amax / 2688, 1e-12)` (2688 = 448 * 6) of a CPU tensor amax.
inline float nv_tensor_scale_cpu(float amax) { return quant::clamp_min(amax / 2688.0f, kEps); }

#if defined(__CUDACC__)
/// On CUDA torch divides by the Python number 2688 as a multiplication by its reciprocal.
__device__ inline float nv_tensor_scale_cuda(float amax) {
    return quant::clamp_min(__fmul_rn(amax, 1.0f / 2688.0f), kEps);
}

/// mx_block_scale with torch's CUDA log2 and exp2 (CUDA's log2f and exp2f, which are not
/// correctly rounded: the same functions give the same floors).
__device__ inline float mx_block_scale_cuda(float amax) {
    const float l = floorf(log2f(quant::clamp_min(amax, 1e-30f)));
    return exp2f(quant::clamp(__fsub_rn(l, 2.0f), -127.0f, 127.0f));
}
#endif

}  // namespace turbo_physai::kernels::fp4
