// csrc/kernels/fake_quant_int_grouped/fake_quant_int_grouped_cuda.h: the CUDA launchers.
#pragma once

#include <cuda_runtime_api.h>

#include "fake_quant_int_grouped/fake_quant_int_grouped.h"

namespace turbo_physai::kernels {

/// The CPU kernels' contracts with device pointers, computing as torch's CUDA kernels do (the
/// dynamic scale's division by qmax, a CPU scalar, as a multiplication by its reciprocal),
/// enqueued on `stream`. Return the launch status.
cudaError_t fake_quant_int_grouped_cuda(const IntGroupedArgs &args, cudaStream_t stream);
cudaError_t unpack_int_grouped_cuda(const UnpackIntGroupedArgs &args, cudaStream_t stream);

}  // namespace turbo_physai::kernels
