// csrc/kernels/fake_quant_fp8/fake_quant_fp8.cpp: fake_quant_fp8 on the CPU, split across threads.
#include "fake_quant_fp8/fake_quant_fp8.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "fake_quant_fp8/fp8_e4m3fn.h"

namespace turbo_physai::kernels {
namespace {

// Elements [begin, end) of the rows x cols view, row by row so the inner loop vectorizes.
void run_range(const FakeQuantFp8Args &a, std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin / a.cols; r < a.rows && r * a.cols < end; ++r) {
        const std::int64_t c0 = std::max<std::int64_t>(begin - r * a.cols, 0);
        const std::int64_t c1 = std::min<std::int64_t>(end - r * a.cols, a.cols);
        const float s = fake_quant_fp8_scale(a.scale[r * a.scale_stride]);
        const float *x = a.x + r * a.x_row_stride;
        float *out = a.out + r * a.out_row_stride;
        for (std::int64_t c = c0; c < c1; ++c)
            out[c] = fake_quant_fp8_value(x[c], s);
    }
}

}  // namespace

void fake_quant_fp8_cpu(const FakeQuantFp8Args &a) {
    const std::int64_t total = a.rows * a.cols;
    // Below ~256K elements starting threads costs more than it saves (tens of microseconds).
    constexpr std::int64_t kPerThread = 1 << 18;
    const std::int64_t hw = std::max(1u, std::thread::hardware_concurrency());
    const std::int64_t workers = std::min(hw, total / kPerThread);
    if (workers <= 1) {
        run_range(a, 0, total);
        return;
    }
    std::vector<std::thread> threads;
    const std::int64_t chunk = (total + workers - 1) / workers;
    for (std::int64_t w = 1; w < workers; ++w)
        threads.emplace_back(run_range, std::cref(a), w * chunk, std::min(total, (w + 1) * chunk));
    run_range(a, 0, chunk);
    for (std::thread &t : threads)
        t.join();
}

}  // namespace turbo_physai::kernels
