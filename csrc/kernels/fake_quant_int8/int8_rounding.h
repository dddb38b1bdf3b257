// csrc/kernels/fake_quant_int8/int8_rounding.h: torch's fake_quantize elements, CPU and CUDA.
//
// LibreYOLO's int8 slots call torch.fake_quantize_per_channel_affine (zero point 0) and
// torch.fake_quantize_per_tensor_affine (tensor qparams from a calibrated [lo, hi]) with the
// range [-128, 127]. torch's CPU and CUDA kernels for them differ where the code is not finite
// (a NaN input, an infinite scale), in the sign of a zero code and in how `amax / 127` is
// divided, so each device has its own element here; the tests compare each with torch on that
// device, bit for bit.
#pragma once

#include <cstdint>

#include "quant_math/torch_float.h"

namespace turbo_physai::kernels::int8 {

constexpr float kMin = -128.0f;
constexpr float kMax = 127.0f;
constexpr float kEps = 1e-12f;

/// A code in [-128, 127] and whether torch's gradient mask lets the gradient through.
struct Code {
    float value;
    bool inside;
};

/// `static_cast<int64_t>(r)` of an integral float r, clamped to [-128, 127], as the host CPU
/// computes it: x86 returns INT64_MIN for NaN and anything beyond int64 (so +Inf becomes -128);
/// Arm saturates and maps NaN to 0.
inline Code host_int64_code(float r) {
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
    const bool wraps = quant::is_nan(r) || r >= 9223372036854775808.0f;
    return {wraps ? kMin : quant::clamp(r, kMin, kMax), r >= kMin && r <= kMax};
#else
    const bool nan = quant::is_nan(r);
    return {nan ? 0.0f : quant::clamp(r, kMin, kMax), nan || (r >= kMin && r <= kMax)};
#endif
}

// --- per channel (zero point 0) -----------------------------------------------------------

/// CPU: `static_cast<int64_t>(0 + nearbyint(x * (1 / s)))` clamped; the caller multiplies by s.
inline Code per_channel_code_cpu(float x, float inv) {
    return host_int64_code(0.0f + quant::round_half_even(x * inv));
}

/// The dynamic scale `max(amax / 127, 1e-12)` of LibreYOLO's int8_weight_qparams on the CPU.
inline float per_channel_scale_cpu(float amax) { return quant::clamp_min(amax / 127.0f, kEps); }

#if defined(__CUDACC__)
/// `static_cast<int64_t>(r)` of an integral float r on the GPU (cvt.rzi.s64.f32: NaN ->
/// INT64_MIN, +-Inf saturate, as torch 2.11's CUDA kernels were seen to give on an H200),
/// clamped to [-128, 127] in integers and converted back: a zero code is +0 whatever r's sign.
__device__ inline Code device_int64_code(float r) {
    const long long q = static_cast<long long>(r);
    const long long bounded = q < -128 ? -128 : (q > 127 ? 127 : q);
    return {static_cast<float>(bounded), q >= -128 && q <= 127};
}

/// CUDA, torch's _fake_quant_per_channel_cachemask_cuda_helper (int32 zero point):
/// `int64(nearbyint(x * inv)) + 0` clamped; the caller multiplies the code by s.
__device__ inline Code per_channel_code_cuda(float x, float inv) {
    return device_int64_code(rintf(__fmul_rn(x, inv)));
}

/// torch divides by a CPU scalar on CUDA as a multiplication by its reciprocal.
__device__ inline float per_channel_scale_cuda(float amax) {
    return quant::clamp_min(__fmul_rn(amax, 1.0f / 127.0f), kEps);
}
#endif

// --- per tensor, affine -------------------------------------------------------------------

/// LibreYOLO's int8_act_qparams from a calibrated [lo, hi]; zero_point is the int32 of a
/// clamped round (a NaN one: the device's conversion of NaN).
struct AffineParams {
    float scale;
    std::int64_t zero_point;
};

/// torch.minimum(v, 0) / torch.maximum(v, 0): a NaN propagates.
TPA_HOST_DEVICE inline float min_zero(float v) { return quant::is_nan(v) ? v : (v < 0.0f ? v : 0.0f); }
TPA_HOST_DEVICE inline float max_zero(float v) { return quant::is_nan(v) ? v : (v > 0.0f ? v : 0.0f); }

/// CPU: `scale = ((hi - lo) / 255).clamp(1e-12)`, `zp = round(-128 - lo / scale).clamp(-128,
/// 127).to(int32)` with x86's NaN -> INT32_MIN (Arm: 0).
inline AffineParams affine_params_cpu(float lo, float hi) {
    lo = min_zero(lo);
    hi = max_zero(hi);
    const float scale = quant::clamp_min((hi - lo) / 255.0f, kEps);
    const float zp = quant::clamp(quant::round_half_even(-128.0f - lo / scale), kMin, kMax);
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
    const std::int64_t nan_zero_point = INT32_MIN;
#else
    const std::int64_t nan_zero_point = 0;
#endif
    return {scale, quant::is_nan(zp) ? nan_zero_point : static_cast<std::int64_t>(zp)};
}

/// CPU element of fake_quantize_per_tensor_affine: `zp + nearbyint(x * inv)` as a float, then
/// fmax/fmin in double (NaN -> -128), `(q - zp) * scale`; the mask tests the float.
struct AffineValue {
    float value;
    bool inside;
};

inline AffineValue affine_value_cpu(float x, const AffineParams &p, float inv) {
    // zp is exact in float32 (in [-128, 127], or INT32_MIN), so float differences round the
    // exact q - zp once, as torch's int64 difference converted to float does.
    const float zp = static_cast<float>(p.zero_point);
    const float qf = zp + quant::round_half_even(x * inv);
    const float q = quant::select(quant::is_nan(qf), kMin, quant::clamp(qf, kMin, kMax));
    return {(q - zp) * p.scale, qf >= kMin && qf <= kMax};
}

/// CUDA: `(hi - lo) * (1 / 255)` (torch divides by a CPU scalar as a multiplication by its
/// reciprocal there) and a saturating int32 conversion (NaN -> 0). Host-callable too: the
/// `scalars=True` check reads the zero point on the host.
TPA_HOST_DEVICE inline AffineParams affine_params_cuda(float lo, float hi) {
    lo = min_zero(lo);
    hi = max_zero(hi);
    const float scale = quant::clamp_min(quant::mul(quant::sub(hi, lo), 1.0f / 255.0f), kEps);
    const float zp = quant::clamp(
        quant::round_half_even(quant::sub(-128.0f, quant::div(lo, scale))), kMin, kMax);
    return {scale, quant::is_nan(zp) ? 0 : static_cast<std::int64_t>(zp)};
}

#if defined(__CUDACC__)
/// CUDA element, torch's fake_quantize_tensor_cachemask_tensor_qparams_kernel_cuda (and the
/// float-qparams fake_quantize_tensor_cachemask_kernel_cuda, the same steps):
/// `int64(nearbyint(x * inv) + zp)` with the float sum, clamped with fminf/fmaxf (exact on
/// these integers, so the integer clamp is the same), then `(q - zp) * scale` in float.
__device__ inline AffineValue affine_value_cuda(float x, const AffineParams &p, float inv) {
    const float zp = static_cast<float>(p.zero_point);
    const Code q = device_int64_code(__fadd_rn(rintf(__fmul_rn(x, inv)), zp));
    return {__fmul_rn(__fsub_rn(q.value, zp), p.scale), q.inside};
}
#endif

}  // namespace turbo_physai::kernels::int8
