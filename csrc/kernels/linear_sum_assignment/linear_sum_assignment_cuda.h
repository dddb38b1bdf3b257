// csrc/kernels/linear_sum_assignment/linear_sum_assignment_cuda.h: the solver on CUDA.
//
// The CPU solver's steps and results (linear_sum_assignment.h), one thread block a problem.
// Nothing here allocates or synchronizes: the caller passes the workspace and the launch is
// enqueued on its stream, so a call can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "linear_sum_assignment/linear_sum_assignment.h"

namespace turbo_physai::kernels {

/// `batch` problems of `rows` x `cols`: problem b's entry (i, j) is
/// `cost[b * batch_stride + i * row_stride + j * col_stride]` (device memory, strides in
/// elements). Problem b writes min(rows, cols) pairs at `row_ind`/`col_ind` + b * min(rows,
/// cols) (-1 on failure) and its LsapStatus to `status[b]`, and uses `workspace` + b *
/// linear_sum_assignment_cuda_workspace_bytes(rows, cols) (256-byte aligned, not initialized).
template <class T>
struct LsapCudaArgs {
    const T *cost;
    std::int64_t rows, cols, row_stride, col_stride;
    std::int64_t batch, batch_stride;
    std::int64_t *row_ind, *col_ind;
    std::int32_t *status;
    void *workspace;
    /// Threads a block: 32, 64, 128, 256 or 512; 0 picks by the problem's width.
    int threads;
};

/// Bytes of one problem's workspace (a multiple of 256).
std::int64_t linear_sum_assignment_cuda_workspace_bytes(std::int64_t rows, std::int64_t cols);

/// Enqueues the solves on `stream`; cudaErrorInvalidValue for sizes beyond 32-bit indexing or
/// an unknown thread count, else the launch's status.
cudaError_t linear_sum_assignment_cuda(const LsapCudaArgs<float> &args, cudaStream_t stream);
cudaError_t linear_sum_assignment_cuda(const LsapCudaArgs<double> &args, cudaStream_t stream);

}  // namespace turbo_physai::kernels
