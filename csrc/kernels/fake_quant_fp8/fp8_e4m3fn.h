// csrc/kernels/fake_quant_fp8/fp8_e4m3fn.h: float32 <-> float8_e4m3fn exactly as torch casts.
//
// Shared by the CPU and CUDA kernels so both round the same way. The contract is bit equality
// with torch's reference `(x / s).clamp(-448, 448).to(float8_e4m3fn).float() * s`, verified
// over float32 bit patterns in tests/ops/test_fake_quant_fp8.py, so every rule here mirrors what
// torch does rather than what would be "nicer" (e.g. the NaN bit pattern on decode).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TPA_HOST_DEVICE __host__ __device__
#else
#define TPA_HOST_DEVICE
#endif

namespace turbo_physai::kernels {

TPA_HOST_DEVICE inline std::uint32_t float_bits(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

TPA_HOST_DEVICE inline float bits_float(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/// Encodes a value already clamped to [-448, 448] (or NaN). Round to nearest, ties to even.
TPA_HOST_DEVICE inline std::uint8_t fp8_e4m3fn_encode(float v) {
    std::uint32_t bits = float_bits(v);
    const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
    bits &= 0x7FFFFFFFu;
    if (bits > 0x7F800000u)
        return sign | 0x7Fu;  // e4m3fn has one NaN per sign and no infinity
    if (bits < (121u << 23)) {
        // Below 2^-6 the e4m3fn grid is uniform with step 2^-9: scale exactly, round to even
        // (rintf uses the current rounding mode, round-to-nearest-even unless someone changed
        // it, the same assumption torch's conversion makes).
        return sign | static_cast<std::uint8_t>(rintf(bits_float(bits) * 512.0f));
    }
    // Normal: keep 3 mantissa bits, rounding at bit 20 half to even; a carry bumps the exponent.
    bits += 0x7FFFFu + ((bits >> 20) & 1u);
    return sign | static_cast<std::uint8_t>((bits >> 20) - (120u << 3));
}

/// Exact decode; NaN decodes to 0x7FF00000 with its sign, the pattern torch's cast returns.
TPA_HOST_DEVICE inline float fp8_e4m3fn_decode(std::uint8_t code) {
    const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
    const std::uint32_t mag = code & 0x7Fu;
    if (mag == 0x7Fu)
        return bits_float(sign | 0x7FF00000u);
    if (mag < 8u)
        return bits_float(sign | float_bits(static_cast<float>(mag) * (1.0f / 512.0f)));
    return bits_float(sign | ((mag + (120u << 3)) << 20));
}

/// The scale floor of SPEC section 6; NaN passes through as torch's clamp lets it.
TPA_HOST_DEVICE inline float fake_quant_fp8_scale(float s) { return s < 1e-12f ? 1e-12f : s; }

/// One element of fake_quant_fp8 with a floored scale, same operation order as the reference.
TPA_HOST_DEVICE inline float fake_quant_fp8_value(float x, float s) {
    float v = x / s;
    v = v < -448.0f ? -448.0f : (v > 448.0f ? 448.0f : v);  // NaN compares false: kept
    return fp8_e4m3fn_decode(fp8_e4m3fn_encode(v)) * s;
}

}  // namespace turbo_physai::kernels
