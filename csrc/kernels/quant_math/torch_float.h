// csrc/kernels/quant_math/torch_float.h: float32 steps spelled exactly as torch's kernels take them.
//
// The quantization kernels are bit-exact to formulations written with torch ops (LibreYOLO's
// references), so each helper here says which torch step it mirrors, NaN and signed zeros
// included. Their .cpp files build with -ffp-contract=off (CMakeLists.txt) and the device
// paths use the _rn intrinsics: a fused multiply-add would round once where torch rounds twice.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TPA_HOST_DEVICE __host__ __device__
#else
#define TPA_HOST_DEVICE
#endif

// CPU loops compiled once per instruction set and picked at load time (GCC's ifunc resolver):
// the package stays baseline x86-64 while AVX2/AVX-512 machines round and select in wide
// vectors. Without FMA contraction every clone computes the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__CUDACC__)
#define TPA_QUANT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TPA_QUANT_CLONES
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

namespace quant {

TPA_HOST_DEVICE inline bool is_nan(float v) { return v != v; }

/// A NaN as an arithmetic instruction returns it: sign and payload kept, quiet bit set.
TPA_HOST_DEVICE inline float quieted(float v) { return bits_float(float_bits(v) | 0x00400000u); }

/// torch.clamp(v, lo, hi) and clamp(min=lo): a NaN passes through.
TPA_HOST_DEVICE inline float clamp(float v, float lo, float hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}
TPA_HOST_DEVICE inline float clamp_min(float v, float lo) { return v < lo ? lo : v; }

/// torch.amax's step: a NaN, once met, is the result.
TPA_HOST_DEVICE inline float max_keep_nan(float m, float v) { return (v > m || is_nan(v)) ? v : m; }

/// torch.round / std::nearbyint: to nearest, ties to even, in the default rounding mode.
TPA_HOST_DEVICE inline float round_half_even(float v) {
#if defined(__CUDA_ARCH__)
    return rintf(v);
#else
    return std::nearbyint(v);
#endif
}

/// Products, quotients, sums rounded on their own (never fused into a multiply-add).
TPA_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
TPA_HOST_DEVICE inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
TPA_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
TPA_HOST_DEVICE inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// Where two NaNs meet, x86 returns the first operand's (quieted), so torch's `a * b` keeps a's;
// the CPU paths spell that out because a compiler may swap a commutative operation's operands.
// CUDA returns its one canonical NaN whatever the operands, for torch and for us alike.

/// `a * b` where a NaN `a` wins over a NaN `b`.
TPA_HOST_DEVICE inline float mul_first(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return is_nan(a) ? quieted(a) : a * b;
#endif
}

/// LibreYOLO's straight-through forward `x + (q - x).detach()`: in float32 this is not always q
/// (both roundings count). A NaN x comes out as itself, quieted, as torch's order gives.
TPA_HOST_DEVICE inline float straight_through(float q, float x) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(x, __fsub_rn(q, x));
#else
    return is_nan(x) ? quieted(x) : x + (q - x);
#endif
}

/// torch.sign: +-1, and +0 for +-0 and NaN.
TPA_HOST_DEVICE inline float sign(float v) { return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f); }

}  // namespace quant
}  // namespace turbo_physai::kernels
