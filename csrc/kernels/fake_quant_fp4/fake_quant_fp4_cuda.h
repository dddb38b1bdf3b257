// csrc/kernels/fake_quant_fp4/fake_quant_fp4_cuda.h: the CUDA launchers (TPA_WITH_CUDA builds).
#pragma once

#include <cuda_runtime_api.h>

#include "fake_quant_fp4/fake_quant_fp4.h"

namespace turbo_physai::kernels {

/// The CPU kernels' contracts with device pointers (tensor_amax too), computing as torch's CUDA
/// kernels do (a CPU scalar's division as a multiplication by its reciprocal, CUDA's log2f and
/// exp2f), enqueued on `stream`. NV with a null tensor_amax first reduces max |x| into
/// `amax_scratch` (one float of device memory, zeroed by the caller). Return the launch status.
cudaError_t fake_quant_fp4_cuda(const Fp4Args &args, float *amax_scratch, cudaStream_t stream);
cudaError_t fake_quant_fp4_backward_cuda(const Fp4BackwardArgs &args, cudaStream_t stream);

/// unpack_nvfp4 with the tensor amax read from device memory.
cudaError_t unpack_nvfp4_cuda(const UnpackNvfp4Args &args, const float *tensor_amax,
                              cudaStream_t stream);

}  // namespace turbo_physai::kernels
