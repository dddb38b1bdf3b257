// csrc/kernels/fake_quant_int_grouped/fake_quant_int_grouped.cpp: grouped int weights on the CPU.
#include "fake_quant_int_grouped/fake_quant_int_grouped.h"

#include <algorithm>

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

TPA_QUANT_CLONES void quantize_group(const float *w, float *out, std::int64_t n, float s,
                                     Range q) {
    for (std::int64_t i = 0; i < n; ++i) {
        const float code = quant::clamp(quant::round_half_even(w[i] / s), q.qmin, q.qmax);
        out[i] = quant::straight_through(quant::mul_first(code, s), w[i]);
    }
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

TPA_QUANT_CLONES void unpack_group(const std::uint8_t *payload, std::int64_t first,
                                   std::int64_t n, float s, int bits, float *out) {
    if (bits == 4)
        unpack_codes<4>(payload, first, n, s, out);
    else
        unpack_codes<2>(payload, first, n, s, out);
}

// Calls group(r, g, c0, n) for every group of `rows` rows of `cols` columns, across threads.
template <class Group>
void for_each_group(std::int64_t rows, std::int64_t cols, std::int64_t group_size,
                    int max_threads, Group group) {
    const std::int64_t groups = (cols + group_size - 1) / group_size;
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / group_size);
    parallel_for(rows * groups, grain, max_threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
            const std::int64_t r = i / groups, g = i - r * groups, c0 = g * group_size;
            group(r, g, c0, std::min(group_size, cols - c0));
        }
    });
}

}  // namespace

void fake_quant_int_grouped_cpu(const IntGroupedArgs &a, int max_threads) {
    if (a.rows <= 0 || a.cols <= 0)
        return;
    const Range q = range_of(a.bits);
    for_each_group(a.rows, a.cols, a.group_size, max_threads,
                   [&](std::int64_t r, std::int64_t g, std::int64_t c0, std::int64_t n) {
                       const float *w = a.w + r * a.w_row_stride + c0;
                       const float s =
                           a.scale ? a.scale[r * a.scale_row_stride + g * a.scale_group_stride]
                                   : quant::abs_max(w, n) / q.qmax;
                       quantize_group(w, a.out + r * a.cols + c0, n, quant::clamp_min(s, kEps), q);
                   });
}

void unpack_int_grouped_cpu(const UnpackIntGroupedArgs &a, int max_threads) {
    if (a.rows <= 0 || a.width <= 0)
        return;
    for_each_group(a.rows, a.width, a.group_size, max_threads,
                   [&](std::int64_t r, std::int64_t g, std::int64_t c0, std::int64_t n) {
                       const float s = a.scale[r * a.scale_row_stride + g * a.scale_group_stride];
                       unpack_group(a.payload + r * a.payload_row_stride, c0, n,
                                    quant::clamp_min(s, kEps), a.bits, a.out + r * a.width + c0);
                   });
}

}  // namespace turbo_physai::kernels
