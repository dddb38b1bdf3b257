// csrc/kernels/quant_math/torch_float.cpp: the reductions of torch_float.h, one clone per ISA.
#include "quant_math/torch_float.h"

namespace turbo_physai::kernels::quant {

TPA_QUANT_CLONES float abs_max(const float *x, std::int64_t n) {
    std::uint32_t m = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t b = float_bits(x[i]) & 0x7FFFFFFFu;
        m = b > m ? b : m;
    }
    return bits_float(m);
}

}  // namespace turbo_physai::kernels::quant
