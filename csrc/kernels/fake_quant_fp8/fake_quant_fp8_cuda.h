// csrc/kernels/fake_quant_fp8/fake_quant_fp8_cuda.h: the CUDA launcher (TPA_WITH_CUDA builds).
#pragma once

#include <cuda_runtime_api.h>

#include "fake_quant_fp8/fake_quant_fp8.h"

namespace turbo_physai::kernels {

/// Same contract as fake_quant_fp8_cpu with device pointers and contiguous rows (row strides ==
/// cols, or a single row); enqueued on `stream` (the caller's
/// current stream, so it orders with the caller's other work and can be graph-captured).
/// Returns the launch status; the kernel itself runs asynchronously.
cudaError_t fake_quant_fp8_cuda(const FakeQuantFp8Args &args, cudaStream_t stream);

}  // namespace turbo_physai::kernels
