// csrc/kernels/fake_quant_int8/fake_quant_int8_cuda.h: the CUDA launchers (TPA_WITH_CUDA builds).
#pragma once

#include <cuda_runtime_api.h>

#include "fake_quant_int8/fake_quant_int8.h"

namespace turbo_physai::kernels {

/// Same contracts as the CPU kernels, with device pointers (lo and hi too), enqueued on
/// `stream`, computing as torch's CUDA kernels do (int8_rounding.h). Return the launch status.
cudaError_t fake_quant_int8_per_channel_cuda(const Int8PerChannelArgs &args, cudaStream_t stream);
cudaError_t fake_quant_int8_per_channel_backward_cuda(const Int8PerChannelBackwardArgs &args,
                                                      cudaStream_t stream);
cudaError_t fake_quant_int8_affine_cuda(const Int8AffineArgs &args, cudaStream_t stream);
cudaError_t fake_quant_int8_affine_backward_cuda(const Int8AffineBackwardArgs &args,
                                                 cudaStream_t stream);

}  // namespace turbo_physai::kernels
