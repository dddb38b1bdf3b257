// csrc/kernels/fake_quant_fp4/fake_quant_fp4_cuda.h: the CUDA launchers (TPA_WITH_CUDA builds).
#pragma once

#include <cuda_runtime_api.h>

#include "fake_quant_fp4/fake_quant_fp4.h"

namespace turbo_physai::kernels {

/// The CPU kernels' contracts with device pointers (tensor_amax too), computing as torch's CUDA
/// kernels do (a CPU scalar's division as a multiplication by its reciprocal, CUDA's log2f and
/// exp2f), enqueued on `stream`. Return the launch status.
cudaError_t fake_quant_fp4_cuda(const Fp4Args &args, cudaStream_t stream);
cudaError_t fake_quant_fp4_backward_cuda(const Fp4BackwardArgs &args, cudaStream_t stream);
cudaError_t unpack_nvfp4_cuda(const UnpackNvfp4Args &args, cudaStream_t stream);

}  // namespace turbo_physai::kernels
