// csrc/kernels/fake_quant_int_grouped/fake_quant_int_grouped.cpp: grouped int weights on the CPU.
#include "fake_quant_int_grouped/fake_quant_int_grouped.h"

#include <algorithm>
#include <cmath>

#include "quant_math/torch_float.h"
#include "turbo_physai/parallel.h"

namespace turbo_physai::kernels {
namespace {

constexpr std::int64_t kGrain = 1 << 15;  // elements per chunk handed to a thread
constexpr float kEps = 1e-12f;

struct Range {
    float qmin, qmax;
};

Range range_of(int bits) {
    const std::int64_t half = std::int64_t{1} << (bits - 1);
    return {static_cast<float>(-half), static_cast<float>(half - 1)};
}

// Codes [first, first + n) of a row, (code - 2^(bits-1)) * s. Byte by byte where the run
// starts on a byte (group sizes that are multiples of the codes a byte holds: all LibreYOLO
// packs), so each byte is loaded once and the loop vectorizes; code by code otherwise.
template <int kBits>
void unpack_codes(const std::uint8_t *payload, std::int64_t first, std::int64_t n, float s,
                  float *out) {
    constexpr int kPerByte = 8 / kBits;
    constexpr unsigned kMask = (1u << kBits) - 1u;
    constexpr float kMin = -static_cast<float>(1 << (kBits - 1));
    std::int64_t i = 0;
    if (first % kPerByte == 0) {
        const std::uint8_t *bytes = payload + first / kPerByte;
        const std::int64_t whole = n / kPerByte;
        for (std::int64_t j = 0; j < whole; ++j) {
            const unsigned b = bytes[j];
            for (int k = 0; k < kPerByte; ++k)
                out[j * kPerByte + k] =
                    (static_cast<float>(static_cast<int>((b >> (k * kBits)) & kMask)) + kMin) * s;
        }
        i = whole * kPerByte;
    }
    for (; i < n; ++i) {
        const std::int64_t code = first + i;
        const unsigned b = payload[code / kPerByte] >> ((code % kPerByte) * kBits);
        out[i] = (static_cast<float>(static_cast<int>(b & kMask)) + kMin) * s;
    }
}

// Group i of a row-major (rows, groups) grid over `cols` columns: row, group, first column
// and width (the last group of a row may be short).
struct Group {
    std::int64_t r, g, c0, n;
};

inline Group group_at(std::int64_t i, std::int64_t groups, std::int64_t group_size,
                      std::int64_t cols) {
    const std::int64_t r = i / groups, g = i - r * groups, c0 = g * group_size;
    return {r, g, c0, std::min(group_size, cols - c0)};
}

// One group's `w + (q - w)`. In a group of finite weights with a scale that is not NaN no
// code is NaN (w / s is finite, +-Inf or 0), so the NaN selects of mul_first and
// straight_through pick their plain expressions: the `kNaNs = false` loop leaves them out (8
// of the AVX-512 loop's 20 instructions) and computes the same bits.
template <bool kNaNs>
inline void quantize_run(const float *__restrict w, float *__restrict out, std::int64_t n,
                         float s, Range q) {
    for (std::int64_t k = 0; k < n; ++k) {
        const float code = quant::clamp(quant::round_half_even(w[k] / s), q.qmin, q.qmax);
        out[k] = kNaNs ? quant::straight_through(quant::mul_first(code, s), w[k])
                       : w[k] + (code * s - w[k]);
    }
}

// The groups [b, e) of a thread's chunk in one call of one clone, abs_max inlined: on runs
// as short as a group (128 floats) a call through the clone's resolver per group, and the
// loop's alias checks (`__restrict` above), are overhead.
TPA_QUANT_CLONES void quantize_groups(const IntGroupedArgs &a, std::int64_t groups,
                                      std::int64_t b, std::int64_t e) {
    const Range q = range_of(a.bits);
    for (std::int64_t i = b; i < e; ++i) {
        const Group at = group_at(i, groups, a.group_size, a.cols);
        const float *w = a.w + at.r * a.w_row_stride + at.c0;
        float *out = a.out + at.r * a.cols + at.c0;
        const float amax = quant::abs_max_inline(w, at.n);  // NaN or Inf if any is
        const float given =
            a.scale ? a.scale[at.r * a.scale_row_stride + at.g * a.scale_group_stride]
                    : amax / q.qmax;
        const float s = quant::clamp_min(given, kEps);
        if (amax < INFINITY && !quant::is_nan(s))
            quantize_run<false>(w, out, at.n, s, q);
        else
            quantize_run<true>(w, out, at.n, s, q);
    }
}

TPA_QUANT_CLONES void unpack_groups(const UnpackIntGroupedArgs &a, std::int64_t groups,
                                    std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
        const Group at = group_at(i, groups, a.group_size, a.width);
        const float s = quant::clamp_min(
            a.scale[at.r * a.scale_row_stride + at.g * a.scale_group_stride], kEps);
        const std::uint8_t *payload = a.payload + at.r * a.payload_row_stride;
        float *out = a.out + at.r * a.width + at.c0;
        if (a.bits == 4)
            unpack_codes<4>(payload, at.c0, at.n, s, out);
        else
            unpack_codes<2>(payload, at.c0, at.n, s, out);
    }
}

// Calls chunk(groups, b, e) on chunks of the rows x groups grid across threads.
template <class Chunk>
void for_each_chunk(std::int64_t rows, std::int64_t cols, std::int64_t group_size,
                    int max_threads, Chunk chunk) {
    const std::int64_t groups = (cols + group_size - 1) / group_size;
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / group_size);
    parallel_for(rows * groups, grain, max_threads,
                 [&](std::int64_t b, std::int64_t e) { chunk(groups, b, e); });
}

}  // namespace

void fake_quant_int_grouped_cpu(const IntGroupedArgs &a, int max_threads) {
    if (a.rows <= 0 || a.cols <= 0)
        return;
    for_each_chunk(a.rows, a.cols, a.group_size, max_threads,
                   [&](std::int64_t groups, std::int64_t b, std::int64_t e) {
                       quantize_groups(a, groups, b, e);
                   });
}

void unpack_int_grouped_cpu(const UnpackIntGroupedArgs &a, int max_threads) {
    if (a.rows <= 0 || a.width <= 0)
        return;
    for_each_chunk(a.rows, a.width, a.group_size, max_threads,
                   [&](std::int64_t groups, std::int64_t b, std::int64_t e) {
                       unpack_groups(a, groups, b, e);
                   });
}

}  // namespace turbo_physai::kernels
