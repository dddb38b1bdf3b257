// csrc/kernels/fake_quant_fp8/fp8_e4m3fn.h: float32 <-> float8_e4m3fn exactly as torch casts.
//
// Shared by the CPU and CUDA kernels so both round the same way. The contract is bit equality
// with torch's reference `(x / s).clamp(-448, 448).to(float8_e4m3fn).float() * s`, verified
// over float32 bit patterns in tests/ops/test_fake_quant_fp8.py, so every rule here mirrors what
// torch does rather than what would be "nicer" (e.g. the NaN bit pattern on decode).
#pragma once

#include <cstdint>

#include "quant_math/torch_float.h"

namespace turbo_physai::kernels {

/// Encodes a value already clamped to [-448, 448] (or NaN). Round to nearest, ties to even.
/// Written without branches (both roundings computed, one selected) so loops vectorize.
TPA_HOST_DEVICE inline std::uint8_t fp8_e4m3fn_encode(float v) {
    const std::uint32_t all = float_bits(v);
    const std::uint32_t sign = (all >> 24) & 0x80u;
    const std::uint32_t bits = all & 0x7FFFFFFFu;
    // Normal (>= 2^-6): keep 3 mantissa bits, rounding at bit 20 half to even; a carry bumps
    // the exponent. Below 2^-6 the grid is uniform with step 2^-9, the ulp of 2^14 in float32:
    // adding 2^14 lets the FPU round (to nearest even, the default mode torch relies on too) and
    // the low bits of the sum count the steps.
    const std::uint32_t normal = ((bits + 0x7FFFFu + ((bits >> 20) & 1u)) >> 20) - (120u << 3);
    const std::uint32_t subnormal = float_bits(bits_float(bits) + 16384.0f) - (141u << 23);
    std::uint32_t mag = bits < (121u << 23) ? subnormal : normal;
    mag = bits > 0x7F800000u ? 0x7Fu : mag;  // e4m3fn has one NaN per sign and no infinity
    return static_cast<std::uint8_t>(sign | mag);
}

/// Exact decode; NaN decodes to 0x7FF00000 with its sign, the pattern torch's cast returns.
TPA_HOST_DEVICE inline float fp8_e4m3fn_decode(std::uint8_t code) {
    const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
    const std::uint32_t mag = code & 0x7Fu;
    const std::uint32_t normal = (mag + (120u << 3)) << 20;
    const std::uint32_t subnormal = float_bits(static_cast<float>(mag) * (1.0f / 512.0f));
    const std::uint32_t bits = mag == 0x7Fu ? 0x7FF00000u : (mag < 8u ? subnormal : normal);
    return bits_float(sign | bits);
}

/// The scale floor of SPEC section 6; NaN passes through as torch's clamp lets it.
TPA_HOST_DEVICE inline float fake_quant_fp8_scale(float s) { return quant::clamp_min(s, 1e-12f); }

/// One element of fake_quant_fp8 with a floored scale, same operation order as the reference.
TPA_HOST_DEVICE inline float fake_quant_fp8_value(float x, float s) {
    const float v = quant::clamp(quant::div(x, s), -448.0f, 448.0f);
    return quant::mul(fp8_e4m3fn_decode(fp8_e4m3fn_encode(v)), s);
}

/// `v.to(float8_e4m3fn).float()` for a v already clamped to [-448, 448] (or NaN).
TPA_HOST_DEVICE inline float fp8_e4m3fn_round(float v) {
    return fp8_e4m3fn_decode(fp8_e4m3fn_encode(v));
}

}  // namespace turbo_physai::kernels
