// csrc/kernels/fake_quant_fp4/fake_quant_fp4.cpp: FP4 fake quantization on the CPU, threaded by blocks.
#include "fake_quant_fp4/fake_quant_fp4.h"

#include <algorithm>
#include <vector>

#include "fake_quant_fp4/e2m1.h"
#include "turbo_physai/parallel.h"

namespace turbo_physai::kernels {
namespace {

constexpr std::int64_t kGrain = 1 << 15;  // elements per chunk handed to a thread

TPA_QUANT_CLONES float block_amax(const float *x, std::int64_t n) {
    float m = 0.0f;  // zero padding cannot raise a maximum of magnitudes
    for (std::int64_t i = 0; i < n; ++i)
        m = quant::max_keep_nan(m, std::fabs(x[i]));
    return m;
}

TPA_QUANT_CLONES void quantize_block(const float *x, float *out, std::int64_t n, float eff) {
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = fp4::fake_quant_e2m1(x[i], eff);
}

TPA_QUANT_CLONES void gradient_block(const float *grad, float *grad_x, std::int64_t n,
                                     float eff) {
    for (std::int64_t i = 0; i < n; ++i)
        grad_x[i] = quant::mul_first(grad[i], eff) / eff;
}

// LibreYOLO's E2M1 magnitudes by level index; the sign bit flips them, zero included (-0).
constexpr float kLevels[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

TPA_QUANT_CLONES void unpack_block(const std::uint8_t *payload, std::int64_t first,
                                   std::int64_t n, float eff, float *out) {
    for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t k = first + i;
        out[i] = kLevels[(payload[k >> 1] >> ((k & 1) * 4)) & 0xF] * eff;
    }
}

// max |x| over the tensor, chunk by chunk; any NaN makes it NaN.
float tensor_amax(const float *x, std::int64_t n, int max_threads) {
    const std::int64_t chunks = (n + kGrain - 1) / kGrain;
    std::vector<float> partial(static_cast<std::size_t>(chunks), 0.0f);
    parallel_for(n, kGrain, max_threads, [&](std::int64_t b, std::int64_t e) {
        partial[static_cast<std::size_t>(b / kGrain)] = block_amax(x + b, e - b);
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
    parallel_for(a.rows * blocks, kGrain / block, max_threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
            const std::int64_t r = i / blocks, c0 = (i - r * blocks) * block;
            const std::int64_t n = std::min(block, a.cols - c0);
            const float *x = a.x + r * a.cols + c0;
            const float amax = block_amax(x, n);
            const float eff = a.format == Fp4Format::mx ? fp4::mx_block_scale(amax)
                                                        : fp4::nv_block_scale(amax, ts, six_ts);
            a.block_scales[i] = eff;
            quantize_block(x, a.out + r * a.cols + c0, n, eff);
        }
    });
}

void fake_quant_fp4_backward_cpu(const Fp4BackwardArgs &a, int max_threads) {
    if (a.rows <= 0 || a.cols <= 0)
        return;
    const std::int64_t blocks = (a.cols + a.block - 1) / a.block;
    parallel_for(a.rows * blocks, kGrain / a.block, max_threads,
                 [&](std::int64_t b, std::int64_t e) {
                     for (std::int64_t i = b; i < e; ++i) {
                         const std::int64_t r = i / blocks, c0 = (i - r * blocks) * a.block;
                         const std::int64_t at = r * a.cols + c0;
                         gradient_block(a.grad + at, a.grad_x + at,
                                        std::min(a.block, a.cols - c0), a.block_scales[i]);
                     }
                 });
}

void unpack_nvfp4_cpu(const UnpackNvfp4Args &a, int max_threads) {
    constexpr std::int64_t kBlock = 16;
    if (a.rows <= 0 || a.width <= 0)
        return;
    const float ts = fp4::nv_tensor_scale_cpu(a.tensor_amax);
    const std::int64_t blocks = (a.width + kBlock - 1) / kBlock;
    parallel_for(a.rows * blocks, kGrain / kBlock, max_threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
            const std::int64_t r = i / blocks, k = i - r * blocks, c0 = k * kBlock;
            const float stored = a.block_scale[r * a.block_row_stride + k * a.block_stride];
            const float eff = quant::clamp_min(quant::mul_first(stored, ts), fp4::kEps);
            unpack_block(a.payload + r * a.payload_row_stride, c0, std::min(kBlock, a.width - c0),
                         eff, a.out + r * a.width + c0);
        }
    });
}

}  // namespace turbo_physai::kernels
