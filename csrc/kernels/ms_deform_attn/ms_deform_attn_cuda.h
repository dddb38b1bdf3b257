// csrc/kernels/ms_deform_attn/ms_deform_attn_cuda.h: multi-scale deformable attention on CUDA.
//
// Same math and layouts as ms_deform_attn.h (SPEC §6), for dense (contiguous) device arrays.
// Nothing here allocates: every launch is enqueued on the caller's stream, and what needs scratch
// memory takes it from the caller, so the calls are CUDA-graph capture safe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace turbo_physai::kernels::msda::cuda {

enum class Dtype { float32, float16, bfloat16 };

/// Sizes of one call. spatial_shapes (L,2) and level_start_index (L,) stay on the device (reading
/// them on the host would synchronize the stream): the kernels read them there and treat a level
/// that does not fit inside value (negative sizes, rows past S) as empty, so bad metadata can never
/// make them read or write out of bounds.
struct Problem {
    std::int64_t batch, value_len, heads, channels, queries, levels, points;
    const std::int64_t *spatial_shapes;     ///< device, (L,2) dense
    const std::int64_t *level_start_index;  ///< device, (L,) dense
    Dtype dtype;  ///< of value and grad_value
    /// Of the locations, weights, output and their gradients: `dtype` when unset (a caller that
    /// names only value's dtype gets it for every array), or float32 with a 16-bit value (mixed
    /// precision: what autocast gives, a 16-bit projection with float32 locations).
    std::optional<Dtype> point_dtype = std::nullopt;
};

/// The dtype of `p`'s locations, weights, output and their gradients.
inline Dtype point_dtype_of(const Problem &p) { return p.point_dtype.value_or(p.dtype); }

/// Whether the kernels take `p`'s pair of dtypes.
inline bool supported_dtypes(const Problem &p) {
    const Dtype points = point_dtype_of(p);
    return points == p.dtype || points == Dtype::float32;
}

/// The kernels keep corner rows (< value_len) in ints and a value row's stride in bytes (M*D
/// elements of up to 8 bytes: the backward's fixed-point accumulator) in 32 bits; forward and
/// backward return cudaErrorInvalidValue for a problem beyond that.
inline bool fits_int_indexing(const Problem &p) {
    return p.value_len <= INT32_MAX && p.heads * p.channels <= (std::int64_t{1} << 29);
}

/// output (N,Lq,M,D) = MSDA(value (N,S,M,D), locations (N,Lq,M,L,P,2), weights (N,Lq,M,L,P));
/// every element is written. Sums run in a fixed order: the forward is deterministic.
cudaError_t forward(const Problem &p, const void *value, const void *sampling_locations,
                    const void *attention_weights, void *output, cudaStream_t stream);

/// How the backward sums grad_value, where many sampling points land on one element.
enum class Accumulation {
    /// float32 only: float atomics straight into grad_value (fastest; sums in arbitrary order).
    direct,
    /// float atomics into a float32 workspace shaped like value, then cast to the value dtype
    /// (float16/bfloat16: float32 accumulation).
    float_workspace,
    /// Deterministic: each finite term becomes a 64-bit fixed-point integer with a power-of-two
    /// scale taken from `bound` (>= the largest possible |sum| of finite terms), integer atomics
    /// add them (integer addition is associative, so the result does not depend on the order),
    /// then one pass scales back. Non-finite terms set per-element flags instead (+inf, -inf,
    /// NaN; OR is associative too), which that pass turns into the IEEE sum: NaN if any term was
    /// NaN or both infinities occurred, else the infinity.
    fixed_point,
    /// Deterministic, faster: the terms become entries in `workspace` (sorted_scratch_bytes(p)
    /// bytes): per (point, corner) keyed by grad_value row, or for dense problems per point keyed
    /// by its top-left corner with four slot coefficients; a stable radix sort groups them by key
    /// and each key's terms are summed in their original order: by gather passes after a sort of
    /// all entries, or, when a head's entries fit one block, by the blocks that sort each head or
    /// (head, level) (sorted_sums.cuh). Bit-reproducible, IEEE sums for non-finite terms; needs
    /// fits_sorted(p).
    sorted,
};

/// How Accumulation::sorted records its terms (sorted_sums.cuh): corners, an entry per (point,
/// corner) keyed by grad_value row; anchors, an entry per point keyed by its top-left corner,
/// whose runs give four slot sums. automatic: corners when there are fewer points than
/// grad_value rows (most runs would hold one point), else anchors.
enum class SortedScheme { automatic, corners, anchors };

/// `asked`, with automatic resolved for `p`.
SortedScheme sorted_scheme(const Problem &p, SortedScheme asked);

/// Whether the sorted accumulation indexes `p`'s entries, keys and points with 32 bits.
bool fits_sorted(const Problem &p, SortedScheme scheme);

/// Whether Accumulation::sorted with `scheme` sorts `p`'s entries in shared-memory blocks, one per
/// head or (head, level) (corners, a head's entries fitting a block: slice_sums.cu), rather than
/// with CUB's device-wide sort and gather passes; false where it does not apply.
bool sorted_by_blocks(const Problem &p, SortedScheme scheme);

/// Bytes of the workspace of Accumulation::sorted for `p` (entries and, unless sorted by blocks,
/// their sorted copies, partial sums and the sort's temporary storage); 0 unless
/// fits_sorted(p, scheme).
std::size_t sorted_scratch_bytes(const Problem &p, SortedScheme scheme);

struct BackwardScratch {
    Accumulation accumulation;
    void *workspace;      ///< value's shape; float32 (float_workspace) or int64 (fixed_point);
                          ///< sorted: sorted_scratch_bytes(p) bytes, 256-byte aligned
    const double *bound;  ///< device scalar, fixed_point only: max|finite grad_output| *
                          ///< sum|finite weights|
    unsigned *flags;      ///< fixed_point only: (value's element count + 7) / 8 words, 4 bits
                          ///< per element; zeroed by backward()
    SortedScheme scheme = SortedScheme::automatic;  ///< sorted only; as the workspace was sized
};

/// Overwrites grad_value (N,S,M,D), grad_sampling_locations and grad_attention_weights from
/// grad_output (N,Lq,M,D).
cudaError_t backward(const Problem &p, const void *value, const void *sampling_locations,
                     const void *attention_weights, const void *grad_output, void *grad_value,
                     void *grad_sampling_locations, void *grad_attention_weights,
                     const BackwardScratch &scratch, cudaStream_t stream);

}  // namespace turbo_physai::kernels::msda::cuda
