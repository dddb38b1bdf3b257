// csrc/kernels/ms_deform_attn/sorted_sums.cuh: the deterministic value gradient by sorting.
//
// Accumulation::sorted: the backward kernel records its terms as entries (key, payload: the
// entry's index, coefficients) instead of adding them to grad_value; a stable radix sort groups
// the entries by key, keeping their original order inside each key; a gather pass sums each
// key's run in that order. Every float is added in an order fixed by the inputs alone, with no
// atomics, so the result is bit-reproducible and non-finite terms follow IEEE sums.
//
// Two schemes, by how many points share a value row (sorted_scheme):
// - corners (sparse problems): one entry per (point, corner), keyed by the corner's grad_value
//   row; a run is a whole row's terms, which the gather writes to grad_value. When a head's
//   entries fit one block, blocks sort them per head or per (head, level) in shared memory and
//   sum them there (slice_sums.cu) instead of the device-wide sort and the gather: one launch
//   instead of six at decoder sizes.
// - anchors (dense problems): one entry per point, keyed by (head, level, its top-left corner
//   clamped into the map: the anchor), with the coefficients of the four "slots" (anchor,
//   right, below, below-right) and which of them are corners inside the map. A run's four
//   slot sums read each grad_output row once instead of four times, into `partials`; a final
//   pass gives each grad_value row the slots that land on it, in a fixed order. A quarter of
//   the entries to record and sort, for the partial sums' traffic.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ms_deform_attn/cuda_common.cuh"
#include "ms_deform_attn/ms_deform_attn_cuda.h"

namespace turbo_physai::kernels::msda::cuda::detail {

/// Sampling points (N*Lq*M*L*P) and grad_value rows (N*S*M) of a problem.
inline std::int64_t sorted_points(const Problem &p) {
    return p.batch * p.queries * p.heads * p.levels * p.points;
}
inline std::int64_t sorted_rows(const Problem &p) { return p.batch * p.value_len * p.heads; }

/// Bits of the largest value below `count` (at least 1, at most 32); the host's layouts and the
/// block sorts' key widths.
__host__ __device__ inline int bits_for(std::int64_t count) {
    int bits = 1;
    while (bits < 32 && (std::int64_t{1} << bits) < count)
        ++bits;
    return bits;
}

/// An anchors payload: the point's index in the low bits, the inside slots in the top four.
constexpr int kSlotShift = 28;
constexpr unsigned kPointMask = (1u << kSlotShift) - 1u;

/// Slot sums per anchors run: anchor, right, below, below-right.
constexpr int kAnchorSlots = 4;

/// The anchors key of the anchor at `local` (its index in its level's map) of level `level` of
/// head `head` (n * M + m): keys run over N*M*L*S. The record writes it, the combine looks it up.
__host__ __device__ inline std::int64_t anchor_key(std::int64_t head, std::int64_t level,
                                                   std::int64_t local, std::int64_t levels,
                                                   std::int64_t value_len) {
    return (head * levels + level) * value_len + local;
}

/// run_of: a key with no run, and (only with overlapping levels whose areas add up past S: more
/// runs than rows) a run whose partial sums did not fit and are summed from its entries instead.
constexpr int kNoRun = -1, kUnstoredRun = -2;

/// How the corners entries are sorted and summed: by CUB's radix sort of them all and the gather
/// (no), or by blocks in shared memory (slice_sums.cu), one per head or one per (head, level) when
/// a head's entries (Lq*L*P*4) fit one block and, for levels, a level's fit a smaller one; such a
/// block sums its slice's rows itself.
enum class BlockSorted { no, heads, levels };
BlockSorted block_sorted(const Problem &p);

/// The caller's byte buffer (sorted_scratch_bytes) cut into the pieces of the sorted path.
struct SortedScratch {
    SortedScheme scheme;
    unsigned *keys;  ///< one entry per (point, corner) or per point, recorded by backward
    unsigned *ids;   ///< their payloads (nullptr when sorted by blocks: those need none)
    float *coef;           ///< per entry (corners) or 4 per point (anchors)
    unsigned *sorted_keys, *sorted_ids;  ///< the sort's second buffers (it ends in either)
    float *pieces;    ///< partial sums of the runs that cross a segment's end (sorted_sums.cu)
    int *run_starts;  ///< anchors: runs begun per segment, then (scanned) before each segment
    int *run_of;      ///< anchors: the run of each key (kNoRun, kUnstoredRun)
    float *partials;  ///< anchors: 4 slot sums of D floats per run, `capacity` runs
    void *temp;
    std::size_t temp_bytes;
    std::int64_t entries, keys_count;  ///< a key of keys_count marks an entry that adds nothing
    std::int64_t capacity;           ///< anchors: runs with room for partials, min(points, rows)
    std::int64_t segments, segment;  ///< the gather's: how many, entries each (0: block sorts)
    int key_bits;                    ///< the bits the sort looks at (keys_count < 2^key_bits)
    BlockSorted block_sorted;  ///< corners: sorted by blocks (slice_sums.cu) or by CUB (no)
};

/// Sorts the recorded corners entries slice by slice and writes the rows they touch of
/// grad_value, a block per slice (block_sorted != no); `layout` and `wide` (kSumsVec channels per
/// lane) as the gather's.
template <typename G, typename V>
cudaError_t sum_by_blocks(const Problem &p, const SortedScratch &s, const Layout &layout,
                          bool wide, const G *grad_out, V *grad_value, cudaStream_t stream);

/// Lays the pieces of `scheme` (resolved) out from `base` (nullptr: sizes only) and returns the
/// bytes they take.
std::size_t sorted_layout(const Problem &p, SortedScheme scheme, void *base, SortedScratch &out);

/// Sorts the recorded entries and writes all of grad_value from them; `grad_out` dense
/// (N, Lq, M, D).
template <typename G, typename V>
cudaError_t sum_sorted(const Problem &p, const SortedScratch &s, const G *grad_out,
                       V *grad_value, cudaStream_t stream);

}  // namespace turbo_physai::kernels::msda::cuda::detail
