// csrc/kernels/fake_quant_fp4/fake_quant_fp4.cpp: FP4 fake quantization on the CPU, threaded by blocks.
#include "fake_quant_fp4/fake_quant_fp4.h"

#include <algorithm>
#include <vector>

#include "fake_quant_fp4/e2m1.h"
#include "turbo_physai/parallel.h"

namespace turbo_physai::kernels {
namespace {

constexpr std::int64_t kGrain = 1 << 15;  // elements per chunk handed to a thread

// A block's effective scale from its amax, in either format.
struct BlockScale {
    Fp4Format format;
    float ts, six_ts;  // NV's tensor scale and 6 * it
    float operator()(float amax) const {
        return format == Fp4Format::mx ? fp4::mx_block_scale(amax)
                                       : fp4::nv_block_scale(amax, ts, six_ts);
    }
};

// `count` consecutive blocks of one row (the last `last` long, the others B): amax, effective
// scale (into effs), elements. Whole blocks run loops of the constant length B, a few vector
// operations without prologue or epilogue (a 16-element loop of runtime length spends more on
// those than on its body). `unroll 1` keeps GCC from unrolling a 16-long loop into scalar code
// before the vectorizer sees it.
#define TPA_VECTOR_LOOP _Pragma("GCC unroll 1")
template <int B>
inline void quantize_run(const float *x, float *out, float *effs, std::int64_t count,
                         std::int64_t last, const BlockScale &scale) {
    for (std::int64_t k = 0; k < count; ++k) {
        const float *xb = x + k * B;
        float *ob = out + k * B;
        float eff;
        if (k + 1 < count || last == B) {
            std::uint32_t m = 0;  // quant::abs_max, inlined at length B
            TPA_VECTOR_LOOP for (int i = 0; i < B; ++i) {
                const std::uint32_t bits = float_bits(xb[i]) & 0x7FFFFFFFu;
                m = bits > m ? bits : m;
            }
            eff = scale(bits_float(m));
            TPA_VECTOR_LOOP for (int i = 0; i < B; ++i)
                ob[i] = fp4::fake_quant_e2m1(xb[i], eff);
        } else {
            eff = scale(quant::abs_max(xb, last));
            for (std::int64_t i = 0; i < last; ++i)
                ob[i] = fp4::fake_quant_e2m1(xb[i], eff);
        }
        effs[k] = eff;
    }
}

TPA_QUANT_CLONES void quantize_run16(const float *x, float *out, float *effs, std::int64_t count,
                                     std::int64_t last, const BlockScale &scale) {
    quantize_run<16>(x, out, effs, count, last, scale);
}
TPA_QUANT_CLONES void quantize_run32(const float *x, float *out, float *effs, std::int64_t count,
                                     std::int64_t last, const BlockScale &scale) {
    quantize_run<32>(x, out, effs, count, last, scale);
}

// The backward over such a run: (grad * eff) / eff.
template <int B>
inline void gradient_run(const float *grad, float *grad_x, const float *effs, std::int64_t count,
                         std::int64_t last) {
    for (std::int64_t k = 0; k < count; ++k) {
        const float eff = effs[k];
        const float *g = grad + k * B;
        float *gx = grad_x + k * B;
        if (k + 1 < count || last == B) {
            TPA_VECTOR_LOOP for (int i = 0; i < B; ++i)
                gx[i] = quant::mul_first(g[i], eff) / eff;
        } else {
            for (std::int64_t i = 0; i < last; ++i)
                gx[i] = quant::mul_first(g[i], eff) / eff;
        }
    }
}

TPA_QUANT_CLONES void gradient_run16(const float *grad, float *grad_x, const float *effs,
                                     std::int64_t count, std::int64_t last) {
    gradient_run<16>(grad, grad_x, effs, count, last);
}
TPA_QUANT_CLONES void gradient_run32(const float *grad, float *grad_x, const float *effs,
                                     std::int64_t count, std::int64_t last) {
    gradient_run<32>(grad, grad_x, effs, count, last);
}

// Calls run(row, first block, block count, length of the last) for the blocks [b, e) of a
// rows x blocks grid, split at row ends.
template <class Run>
void for_each_row_run(std::int64_t b, std::int64_t e, std::int64_t blocks, std::int64_t cols,
                      std::int64_t block, Run run) {
    while (b < e) {
        const std::int64_t r = b / blocks, k = b - r * blocks;
        const std::int64_t end = std::min(e, (r + 1) * blocks);
        const std::int64_t last_k = end - r * blocks - 1;
        run(r, k, end - b, std::min(block, cols - last_k * block));
        b = end;
    }
}

// LibreYOLO's E2M1 value of a 4-bit code (sign << 3 | level index): levels 0, 0.5, 1, 1.5, 2,
// 3, 4, 6, negated for the sign bit (so a negative code 0 is -0, as `level * -1.0` gives).
inline float e2m1_value(unsigned code) {
    const int index = static_cast<int>(code & 7u);
    const float level = index < 4 ? 0.5f * static_cast<float>(index)
                                  : (index == 7 ? 6.0f : static_cast<float>(index - 2));
    return quant::select((code & 8u) != 0u, -level, level);
}

// The first `width` codes of a row, decoded (one long loop over the row's bytes: it vectorizes,
// where a 16-code block's 8 bytes are too few), then each block times its scale.
TPA_QUANT_CLONES void unpack_row(const std::uint8_t *bytes, const float *effs, std::int64_t width,
                                 float *out) {
    const std::int64_t whole = width / 2;
    for (std::int64_t j = 0; j < whole; ++j) {
        const unsigned b = bytes[j];
        out[2 * j] = e2m1_value(b & 0xFu);
        out[2 * j + 1] = e2m1_value(b >> 4);
    }
    if (width % 2)
        out[width - 1] = e2m1_value(bytes[whole] & 0xFu);
    for (std::int64_t c0 = 0; c0 < width; c0 += 16) {
        const float eff = effs[c0 / 16];
        const std::int64_t n = std::min<std::int64_t>(16, width - c0);
        for (std::int64_t i = 0; i < n; ++i)
            out[c0 + i] *= eff;
    }
}

// max |x| over the tensor, chunk by chunk; any NaN makes it NaN.
float tensor_amax(const float *x, std::int64_t n, int max_threads) {
    const std::int64_t chunks = (n + kGrain - 1) / kGrain;
    std::vector<float> partial(static_cast<std::size_t>(chunks), 0.0f);
    parallel_for(n, kGrain, max_threads, [&](std::int64_t b, std::int64_t e) {
        partial[static_cast<std::size_t>(b / kGrain)] = quant::abs_max(x + b, e - b);
    });
    float m = 0.0f;
    for (float p : partial)
        m = quant::max_keep_nan(m, p);
    return m;
}

}  // namespace

void fake_quant_fp4_cpu(const Fp4Args &a, int max_threads) {
    if (a.rows <= 0 || a.cols <= 0)
        return;
    const std::int64_t block = fp4_block(a.format);
    const std::int64_t blocks = (a.cols + block - 1) / block;
    float ts = 0.0f, six_ts = 0.0f;
    if (a.format == Fp4Format::nv) {
        const float amax = a.tensor_amax ? *a.tensor_amax
                                         : tensor_amax(a.x, a.rows * a.cols, max_threads);
        ts = fp4::nv_tensor_scale_cpu(amax);
        six_ts = quant::mul_first(ts, 6.0f);
    }
    const BlockScale scale{a.format, ts, six_ts};
    parallel_for(a.rows * blocks, kGrain / block, max_threads, [&](std::int64_t b, std::int64_t e) {
        for_each_row_run(b, e, blocks, a.cols, block,
                         [&](std::int64_t r, std::int64_t k, std::int64_t count, std::int64_t last) {
                             const std::int64_t at = r * a.cols + k * block;
                             float *effs = a.block_scales + r * blocks + k;
                             if (block == 16)
                                 quantize_run16(a.x + at, a.out + at, effs, count, last, scale);
                             else
                                 quantize_run32(a.x + at, a.out + at, effs, count, last, scale);
                         });
    });
}

void fake_quant_fp4_backward_cpu(const Fp4BackwardArgs &a, int max_threads) {
    if (a.rows <= 0 || a.cols <= 0)
        return;
    const std::int64_t blocks = (a.cols + a.block - 1) / a.block;
    parallel_for(a.rows * blocks, kGrain / a.block, max_threads, [&](std::int64_t b, std::int64_t e) {
        for_each_row_run(b, e, blocks, a.cols, a.block,
                         [&](std::int64_t r, std::int64_t k, std::int64_t count, std::int64_t last) {
                             const std::int64_t at = r * a.cols + k * a.block;
                             const float *effs = a.block_scales + r * blocks + k;
                             if (a.block == 16)
                                 gradient_run16(a.grad + at, a.grad_x + at, effs, count, last);
                             else
                                 gradient_run32(a.grad + at, a.grad_x + at, effs, count, last);
                         });
    });
}

void unpack_nvfp4_cpu(const UnpackNvfp4Args &a, int max_threads) {
    constexpr std::int64_t kBlock = 16;
    if (a.rows <= 0 || a.width <= 0)
        return;
    const float ts = fp4::nv_tensor_scale_cpu(*a.tensor_amax);
    const std::int64_t blocks = (a.width + kBlock - 1) / kBlock;
    parallel_for(a.rows, std::max<std::int64_t>(1, kGrain / a.width), max_threads,
                 [&](std::int64_t b, std::int64_t e) {
                     std::vector<float> effs(static_cast<std::size_t>(blocks));
                     for (std::int64_t r = b; r < e; ++r) {
                         for (std::int64_t k = 0; k < blocks; ++k) {
                             const float stored =
                                 a.block_scale[r * a.block_row_stride + k * a.block_stride];
                             effs[static_cast<std::size_t>(k)] = quant::clamp_min(
                                 quant::mul_first(stored, ts), fp4::kEps);
                         }
                         unpack_row(a.payload + r * a.payload_row_stride, effs.data(), a.width,
                                    a.out + r * a.width);
                     }
                 });
}

}  // namespace turbo_physai::kernels
