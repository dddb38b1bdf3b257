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
// vectors. Without FMA contraction every clone computes the same bits. `flatten` inlines what
// a clone calls, so no clone runs a baseline copy of its loops.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__CUDACC__)
#define TPA_QUANT_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
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

/// `c ? a : b` as bit masks, so that the loops holding it vectorize (GCC does not if-convert
/// every conditional expression); a plain conditional on the device.
TPA_HOST_DEVICE inline float select(bool c, float a, float b) {
#if defined(__CUDA_ARCH__)
    return c ? a : b;
#else
    const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
    return bits_float((float_bits(a) & m) | (float_bits(b) & ~m));
#endif
}

/// A NaN as an arithmetic instruction returns it: sign and payload kept, quiet bit set.
TPA_HOST_DEVICE inline float quieted(float v) { return bits_float(float_bits(v) | 0x00400000u); }

/// torch.clamp(v, lo, hi) and clamp(min=lo): a NaN passes through.
TPA_HOST_DEVICE inline float clamp_min(float v, float lo) { return select(v < lo, lo, v); }
TPA_HOST_DEVICE inline float clamp_max(float v, float hi) { return select(v > hi, hi, v); }
TPA_HOST_DEVICE inline float clamp(float v, float lo, float hi) {
    return clamp_max(clamp_min(v, lo), hi);
}

/// torch.amax's step: a NaN, once met, is the result.
TPA_HOST_DEVICE inline float max_keep_nan(float m, float v) { return (v > m || is_nan(v)) ? v : m; }

/// max |x[i]| over n floats (0 for none), NaN if any is NaN: torch.amax of abs. On magnitudes
/// the float order is the order of the bit patterns, NaNs above infinity, so one unsigned
/// maximum does it and vectorizes; among several NaNs the largest pattern is kept (torch keeps
/// one of them). Inline for loops that take it into their own clone (short runs, where a call
/// costs as much as the reduction); `abs_max` is its out-of-line clone (torch_float.cpp).
inline float abs_max_inline(const float *x, std::int64_t n) {
    std::uint32_t m = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t b = float_bits(x[i]) & 0x7FFFFFFFu;
        m = b > m ? b : m;
    }
    return bits_float(m);
}
float abs_max(const float *x, std::int64_t n);

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
    return select(is_nan(a), quieted(a), a * b);
#endif
}

/// LibreYOLO's straight-through forward `x + (q - x).detach()`: in float32 this is not always q
/// (both roundings count). A NaN x comes out as itself, quieted, as torch's order gives.
TPA_HOST_DEVICE inline float straight_through(float q, float x) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(x, __fsub_rn(q, x));
#else
    return select(is_nan(x), quieted(x), x + (q - x));
#endif
}

/// torch.sign: +-1, and +0 for +-0 and NaN.
TPA_HOST_DEVICE inline float sign(float v) {
    return static_cast<float>(static_cast<int>(v > 0.0f) - static_cast<int>(v < 0.0f));
}

}  // namespace quant
}  // namespace turbo_physai::kernels
