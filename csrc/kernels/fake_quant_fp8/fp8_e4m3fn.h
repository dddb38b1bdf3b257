// csrc/kernels/fake_quant_fp8/fp8_e4m3fn.h: float32 -> float8_e4m3fn -> float32 exactly as torch casts.
//
// Shared by the CPU and CUDA kernels so both round the same way. The contract is bit equality
// with torch's reference `(x / s).clamp(-448, 448).to(float8_e4m3fn).float() * s`, verified
// over float32 bit patterns in tests/ops/test_fake_quant_fp8.py, so every rule here mirrors what
// torch does rather than what would be "nicer" (e.g. the NaN bit pattern on decode).
#pragma once

#include <cstdint>

#include "quant_math/torch_float.h"

namespace turbo_physai::kernels {

/// `v.to(float8_e4m3fn).float()` for a v already clamped to [-448, 448] (or NaN), computed on
/// float32 bits without forming the 8-bit code. Round to nearest, ties to even; a NaN becomes
/// 0x7FF00000 with its sign, the pattern torch's cast back returns. Branch-free (both roundings
/// computed, one selected) so loops vectorize.
TPA_HOST_DEVICE inline float fp8_e4m3fn_round(float v) {
    const std::uint32_t all = float_bits(v);
    const std::uint32_t sign = all & 0x80000000u;
    const std::uint32_t mag = all & 0x7FFFFFFFu;
    // Normal (>= 2^-6): keep 3 mantissa bits, rounding at bit 20 half to even; a carry bumps
    // the exponent. Below 2^-6 the grid is uniform with step 2^-9, the ulp of 2^14 in float32:
    // adding 2^14 lets the FPU round (to nearest even, the default mode torch relies on too),
    // and subtracting it again is exact.
    const std::uint32_t normal = (mag + 0x7FFFFu + ((mag >> 20) & 1u)) & 0xFFF00000u;
    const std::uint32_t small =
        float_bits(quant::sub(quant::add(bits_float(mag), 16384.0f), 16384.0f));
    // mag < 2^31: signed comparisons, which SIMD units have
    const auto m = static_cast<std::int32_t>(mag);
    std::uint32_t rounded = m < (121 << 23) ? small : normal;
    rounded = m > 0x7F800000 ? 0x7FF00000u : rounded;  // e4m3fn: one NaN per sign, no Inf
    return bits_float(sign | rounded);
}

/// The scale floor of SPEC section 6; NaN passes through as torch's clamp lets it.
TPA_HOST_DEVICE inline float fake_quant_fp8_scale(float s) { return quant::clamp_min(s, 1e-12f); }

/// One element of fake_quant_fp8 with a floored scale, same operation order as the reference.
TPA_HOST_DEVICE inline float fake_quant_fp8_value(float x, float s) {
    const float v = quant::clamp(quant::div(x, s), -448.0f, 448.0f);
    return quant::mul(fp8_e4m3fn_round(v), s);
}

}  // namespace turbo_physai::kernels
