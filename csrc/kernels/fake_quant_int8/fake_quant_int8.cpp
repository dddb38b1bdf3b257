// csrc/kernels/fake_quant_int8/fake_quant_int8.cpp: int8 fake quantization on the CPU, threaded.
#include "fake_quant_int8/fake_quant_int8.h"

#include <algorithm>

#include "fake_quant_int8/int8_rounding.h"
#include "turbo_physai/parallel.h"

namespace turbo_physai::kernels {
namespace {

// Elements per chunk handed to a thread (~10 us of work).
constexpr std::int64_t kGrain = 1 << 15;

// Channel c's elements are `outer` runs of `inner` contiguous floats, `channels * inner` apart.
template <class Run>
void for_each_run(std::int64_t outer, std::int64_t channels, std::int64_t inner, std::int64_t c,
                  Run run) {
    for (std::int64_t o = 0; o < outer; ++o)
        run((o * channels + c) * inner);
}

TPA_QUANT_CLONES void per_channel_run(const float *x, float *out, std::int64_t n, float s) {
    const float inv = 1.0f / s;
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = int8::per_channel_code_cpu(x[i], inv).value * s;
}

TPA_QUANT_CLONES void per_channel_grad_run(const float *grad, const float *x, float *grad_x,
                                           std::int64_t n, float s) {
    const float inv = 1.0f / s;
    for (std::int64_t i = 0; i < n; ++i)
        grad_x[i] = grad[i] * (int8::per_channel_code_cpu(x[i], inv).inside ? 1.0f : 0.0f);
}

TPA_QUANT_CLONES void affine_run(const float *x, float *out, std::int64_t n,
                                 int8::AffineParams p) {
    const float inv = 1.0f / p.scale;
    for (std::int64_t i = 0; i < n; ++i)
        out[i] = int8::affine_value_cpu(x[i], p, inv).value;
}

TPA_QUANT_CLONES void affine_grad_run(const float *grad, const float *x, float *grad_x,
                                      std::int64_t n, int8::AffineParams p) {
    const float inv = 1.0f / p.scale;
    for (std::int64_t i = 0; i < n; ++i)
        grad_x[i] = grad[i] * (int8::affine_value_cpu(x[i], p, inv).inside ? 1.0f : 0.0f);
}

// A channel's share of the work in chunks: whole channels per chunk, at least one.
std::int64_t channel_grain(const Int8PerChannelArgs &a) {
    return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, a.outer * a.inner));
}

}  // namespace

void fake_quant_int8_per_channel_cpu(const Int8PerChannelArgs &a, int max_threads) {
    if (a.outer * a.channels * a.inner == 0)
        return;
    parallel_for(a.channels, channel_grain(a), max_threads, [&a](std::int64_t b, std::int64_t e) {
        for (std::int64_t c = b; c < e; ++c) {
            if (a.dynamic) {
                float amax = 0.0f;
                for_each_run(a.outer, a.channels, a.inner, c, [&](std::int64_t at) {
                    amax = quant::max_keep_nan(amax, quant::abs_max(a.x + at, a.inner));
                });
                a.scale[c] = int8::per_channel_scale_cpu(amax);
            }
            const float s = a.scale[c];
            for_each_run(a.outer, a.channels, a.inner, c, [&](std::int64_t at) {
                per_channel_run(a.x + at, a.out + at, a.inner, s);
            });
        }
    });
}

void fake_quant_int8_per_channel_backward_cpu(const Int8PerChannelBackwardArgs &a,
                                              int max_threads) {
    const std::int64_t rows = a.outer * a.channels;  // a row: `inner` floats of one channel
    if (rows * a.inner == 0)
        return;
    const std::int64_t grain = std::max<std::int64_t>(1, kGrain / a.inner);
    parallel_for(rows, grain, max_threads, [&a](std::int64_t b, std::int64_t e) {
        for (std::int64_t r = b; r < e; ++r) {
            const std::int64_t at = r * a.inner;
            per_channel_grad_run(a.grad + at, a.x + at, a.grad_x + at, a.inner,
                                 a.scale[r % a.channels]);
        }
    });
}

void fake_quant_int8_affine_cpu(const Int8AffineArgs &a, int max_threads) {
    const int8::AffineParams p = int8::affine_params_cpu(*a.lo, *a.hi);
    parallel_for(a.n, kGrain, max_threads, [&](std::int64_t b, std::int64_t e) {
        affine_run(a.x + b, a.out + b, e - b, p);
    });
}

void fake_quant_int8_affine_backward_cpu(const Int8AffineBackwardArgs &a, int max_threads) {
    const int8::AffineParams p = int8::affine_params_cpu(*a.lo, *a.hi);
    parallel_for(a.n, kGrain, max_threads, [&](std::int64_t b, std::int64_t e) {
        affine_grad_run(a.grad + b, a.x + b, a.grad_x + b, e - b, p);
    });
}

std::int64_t int8_affine_zero_point(float lo, float hi, bool cuda_rules) {
    return (cuda_rules ? int8::affine_params_cuda(lo, hi) : int8::affine_params_cpu(lo, hi))
        .zero_point;
}

}  // namespace turbo_physai::kernels
