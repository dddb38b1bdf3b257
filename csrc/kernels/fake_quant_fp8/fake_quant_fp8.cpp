// csrc/kernels/fake_quant_fp8/fake_quant_fp8.cpp: fake_quant_fp8 on the CPU, split across threads.
#include "fake_quant_fp8/fake_quant_fp8.h"

#include <algorithm>

#include "fake_quant_fp8/fp8_e4m3fn.h"
#include "turbo_physai/parallel.h"

namespace turbo_physai::kernels {
namespace {

// Elements per chunk handed to a thread: ~10 us of work, so the chunk counter costs nothing.
constexpr std::int64_t kGrain = 1 << 15;

// Elements [begin, end) of the rows x cols view, row by row so the inner loop vectorizes.
TPA_QUANT_CLONES void run_range(const FakeQuantFp8Args &a, std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin / a.cols; r < a.rows && r * a.cols < end; ++r) {
        const std::int64_t c0 = std::max<std::int64_t>(begin - r * a.cols, 0);
        const std::int64_t c1 = std::min<std::int64_t>(end - r * a.cols, a.cols);
        const float s = fake_quant_fp8_scale(a.scale[r * a.scale_stride]);
        const float *x = a.x + r * a.x_row_stride;
        float *out = a.out + r * a.out_row_stride;
        if (a.straight_through) {
            for (std::int64_t c = c0; c < c1; ++c)
                out[c] = quant::straight_through(fake_quant_fp8_value(x[c], s), x[c]);
        } else {
            for (std::int64_t c = c0; c < c1; ++c)
                out[c] = fake_quant_fp8_value(x[c], s);
        }
    }
}

}  // namespace

void fake_quant_fp8_cpu(const FakeQuantFp8Args &a, int max_threads) {
    // An empty view has nothing to do (and cols = 0 must not reach the division in run_range).
    if (a.rows <= 0 || a.cols <= 0)
        return;
    parallel_for(a.rows * a.cols, kGrain, max_threads,
                 [&a](std::int64_t begin, std::int64_t end) { run_range(a, begin, end); });
}

}  // namespace turbo_physai::kernels
