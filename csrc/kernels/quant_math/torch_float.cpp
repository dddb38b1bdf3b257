// csrc/kernels/quant_math/torch_float.cpp: the reductions of torch_float.h, one clone per ISA.
#include "quant_math/torch_float.h"

namespace turbo_physai::kernels::quant {

TPA_QUANT_CLONES float abs_max(const float *x, std::int64_t n) { return abs_max_inline(x, n); }

}  // namespace turbo_physai::kernels::quant
