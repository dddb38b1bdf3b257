// csrc/kernels/ms_deform_attn/sorted_sums.cuh: the deterministic value gradient by sorting.
//
// Accumulation::sorted: the backward kernel records every (point, corner) it touches as an entry
// (key: the grad_value row, payload: the entry's own index, and its coefficient attn * bilinear
// weight) instead of adding to grad_value; a stable radix sort groups the entries by row, keeping
// their original order inside each row; then a gather pass sums each row's entries in that order
// (coefficient x the grad_output row of the entry's query) and writes the row. Every float is
// added in an order fixed by the inputs alone, with no atomics, so the result is bit-reproducible
// and non-finite terms follow IEEE sums. Costs entry arrays and a sort instead of the fixed-point
// path's 64-bit atomics (4x the reduction requests of the float path, on an L2-bound kernel).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ms_deform_attn/ms_deform_attn_cuda.h"

namespace turbo_physai::kernels::msda::cuda::detail {

/// The caller's byte buffer (sorted_scratch_bytes) cut into the pieces of the sorted path.
struct SortedScratch {
    unsigned *keys, *ids;  ///< one entry per (point, corner), written by the backward kernel
    float *coef;           ///< indexed by entry
    unsigned *sorted_keys, *sorted_ids;
    float *pieces;  ///< partial sums of the runs that cross a segment's end (sorted_sums.cu)
    void *temp;
    std::size_t temp_bytes;
    std::int64_t entries, rows;  ///< N*Lq*M*L*P*4 and N*S*M; a key of `rows` marks no corner
    std::int64_t segments, segment;  ///< how many, and entries per segment (sorted_sums.cu)
    int key_bits;                ///< the bits the sort looks at (rows < 2^key_bits)
};

/// Lays the pieces out from `base` (nullptr: sizes only) and returns the bytes they take.
std::size_t sorted_layout(const Problem &p, void *base, SortedScratch &out);

/// Sorts the recorded entries and writes all of grad_value from them; `grad_out` dense
/// (N, Lq, M, D) of T.
template <typename T>
cudaError_t sum_sorted(const Problem &p, const SortedScratch &s, const T *grad_out,
                       T *grad_value, cudaStream_t stream);

}  // namespace turbo_physai::kernels::msda::cuda::detail
