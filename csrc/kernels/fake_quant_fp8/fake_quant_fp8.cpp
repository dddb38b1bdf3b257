// csrc/kernels/fake_quant_fp8/fake_quant_fp8.cpp: fake_quant_fp8 on the CPU, row by row.
#include "fake_quant_fp8/fake_quant_fp8.h"

#include "fake_quant_fp8/fp8_e4m3fn.h"

namespace turbo_physai::kernels {

void fake_quant_fp8_cpu(const FakeQuantFp8Args &a) {
    for (std::int64_t r = 0; r < a.rows; ++r) {
        const float s = fake_quant_fp8_scale(a.scale[r * a.scale_stride]);
        const float *x = a.x + r * a.x_row_stride;
        float *out = a.out + r * a.out_row_stride;
        for (std::int64_t c = 0; c < a.cols; ++c)
            out[c] = fake_quant_fp8_value(x[c], s);
    }
}

}  // namespace turbo_physai::kernels
