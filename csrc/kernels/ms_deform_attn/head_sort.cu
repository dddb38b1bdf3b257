// csrc/kernels/ms_deform_attn/head_sort.cu: the corners scheme's sort, by blocks.
//
// A head's (n, m) entries only key that head's rows, and with levels that do not overlap a
// level's entries only key that level's rows: sorting each head, or each (head, level), on its
// own groups the rows just as a sort of all entries does. When such a slice fits one block
// (decoders: a few hundred queries x P points x 4 corners per level), a block sorts it in shared
// memory: the row within the slice above the entry's index within it, in one 32-bit word,
// radix-sorted on the row bits only, which keeps entry order inside a row (the input is in that
// order). CUB's sort of all entries runs three device-wide passes whose cost at decoder sizes is
// latency, not bytes (12 us each at 300 K entries); this is one launch with every slice in
// parallel, plus, with levels, one whose blocks sort whole heads only if the levels overlap
// (the level metadata stays on the device, so the host cannot tell).
#include <cub/block/block_radix_sort.cuh>

#include "ms_deform_attn/cuda_common.cuh"
#include "ms_deform_attn/sorted_sums.cuh"

namespace turbo_physai::kernels::msda::cuda::detail {
namespace {

/// A block sort's shape: threads, entries per thread, radix bits per pass. A block radix sort
/// costs its capacity (threads x entries) whatever the count, so a level gets a smaller one than
/// a whole head.
template <int kThreadsPerBlock, int kItemsPerThread, int kRadixBits>
struct SortShape {
    static constexpr int kThreads = kThreadsPerBlock, kItems = kItemsPerThread;
    static constexpr std::int64_t kCapacity = std::int64_t{kThreads} * kItems;
    using Sort = cub::BlockRadixSort<unsigned, kThreads, kItems, cub::NullType, kRadixBits>;
    /// Shared memory: the sort's, then the level table (16-byte aligned).
    static constexpr std::size_t kSortBytes = (sizeof(typename Sort::TempStorage) + 15) / 16 * 16;
};
// 5-bit digits: three passes over a decoder's 14-15 row bits (4-bit: four). Measured on the H200,
// GPU time of the sort launches per call on the DETR / RT-DETR decoders (4800 entries per level):
// 512 x 10 11.9 / 42.2 us, 512 x 12 12.9 / 45.6, 256 x 20 with 6-bit digits 14.1 / 45.5, 1024 x 5
// 16.6 / 68.1; whole heads (19200 / 14400 entries) at 512 x 40: 26.9 / 58.5.
using LevelSort = SortShape<512, 10, 5>;
using HeadSort = SortShape<512, 40, 5>;

/// Which blocks work: each level of each head when the levels do not overlap, or each head
/// (always, or only when the levels overlap: the levels launch then left it undone).
enum class Slices { levels, heads, heads_if_overlapping };

struct SliceSortArgs {
    Shape s;
    const unsigned *keys;  ///< per entry, in entry order: grad_value row or `none`
    unsigned *sorted_keys, *sorted_ids;
    unsigned per_query;   ///< a head's entries per query (4 L P)
    unsigned span;        ///< a slice's entries per query (4 P, or 4 L P for heads)
    unsigned span_magic;  ///< ceil(2^32 / span): i / span = umulhi(i, magic), exact below 2^16
    unsigned none;
    int index_bits;  ///< bits of an entry's index in its slice
};

__device__ inline int bits_below(unsigned count) {  // bits of the largest value below count
    return count > 1 ? 32 - __clz(count - 1) : 1;
}

/// Block (head n * M + m, level blockIdx.y for Slices::levels): writes the slice's entries
/// sorted by row (entry order within a row, the corners outside the map last) to
/// sorted_keys/sorted_ids from head * (its entries) + level * (a level's entries).
// A level's blocks two per SM (64 registers), a head's one (its 80 KB of shared memory would
// allow two, but its 40 keys per thread need the registers).
template <typename Shape, Slices kSlices>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kThreads * Shape::kItems > 8192 ? 1 : 2)
    slice_sort_kernel(SliceSortArgs a) {
    constexpr int kItems = Shape::kItems;
    extern __shared__ __align__(16) unsigned char smem[];
    auto &temp = *reinterpret_cast<typename Shape::Sort::TempStorage *>(smem);
    Level *levels = level_table(smem, Shape::kSortBytes);
    __shared__ bool overlapping;
    load_levels(a.s, levels);
    __syncthreads();
    if (kSlices != Slices::heads && threadIdx.x == 0) {
        bool any = false;  // two non-empty levels sharing a row of value
        for (int l = 0; l < a.s.levels; ++l)
            for (int k = l + 1; k < a.s.levels; ++k) {
                const Level x = levels[l], y = levels[k];
                any = any || (x.h > 0 && y.h > 0 && x.start < y.start + y.h * y.w &&
                              y.start < x.start + x.h * x.w);
            }
        overlapping = any;
    }
    __syncthreads();
    if ((kSlices == Slices::levels && overlapping) ||
        (kSlices == Slices::heads_if_overlapping && !overlapping))
        return;
    const auto S = static_cast<unsigned>(a.s.value_len), M = static_cast<unsigned>(a.s.heads);
    const unsigned head = blockIdx.x, n = head / M, m = head - n * M, level = blockIdx.y;
    const auto queries = static_cast<unsigned>(a.s.queries);
    const unsigned count = queries * a.span, index_mask = (1u << a.index_bits) - 1u;
    // The slice's rows: key / M - first .. + rows; `rows` marks a corner outside the map.
    unsigned first = n * S, rows = S;
    if (kSlices == Slices::levels) {
        const Level lv = levels[level];
        first += static_cast<unsigned>(lv.start);
        rows = static_cast<unsigned>(lv.h * lv.w);
    }
    const unsigned skip = kSlices == Slices::levels ? level * a.span : 0u;
    const auto entry_of = [&](unsigned i) {  // entries run over (n, q, m, level, point, corner)
        const unsigned q = __umulhi(i, a.span_magic);
        return ((n * queries + q) * M + m) * a.per_query + skip + (i - q * a.span);
    };
    unsigned packed[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
        const unsigned i = threadIdx.x * kItems + j;  // blocked: input order = entry order
        packed[j] = ~0u;  // past the slice's entries: sorts after them all (row bits all ones)
        if (i < count) {
            const unsigned key = a.keys[entry_of(i)];
            packed[j] = (key < a.none ? key / M - first : rows) << a.index_bits | i;
        }
    }
    typename Shape::Sort(temp).SortBlockedToStriped(packed, a.index_bits,
                                                 a.index_bits + bits_below(rows + 1));
    // The head's entries, then (levels) the slices of the levels before this one.
    const std::int64_t base = (static_cast<std::int64_t>(head) * a.per_query + skip) * queries;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
        const unsigned rank = j * Shape::kThreads + threadIdx.x;  // striped: coalesced stores
        if (rank >= count)
            continue;
        const unsigned row = packed[j] >> a.index_bits;
        a.sorted_keys[base + rank] = row < rows ? (first + row) * M + m : a.none;
        a.sorted_ids[base + rank] = entry_of(packed[j] & index_mask);
    }
}

template <typename Shape, Slices kSlices>
cudaError_t launch_slices(const Problem &p, const SortedScratch &s, unsigned span,
                          cudaStream_t stream) {
    const std::size_t bytes = Shape::kSortBytes + sizeof(Level) * p.levels;
    if (const cudaError_t err = cudaFuncSetAttribute(
            slice_sort_kernel<Shape, kSlices>, cudaFuncAttributeMaxDynamicSharedMemorySize,
            static_cast<int>(bytes)))
        return err;
    const SliceSortArgs a{shape_of(p),
                          s.keys,
                          s.sorted_keys,
                          s.sorted_ids,
                          static_cast<unsigned>(4 * p.levels * p.points),
                          span,
                          static_cast<unsigned>(((std::uint64_t{1} << 32) + span - 1) / span),
                          static_cast<unsigned>(s.keys_count),
                          bits_for(p.queries * span)};
    const dim3 grid(static_cast<unsigned>(p.batch * p.heads),
                    kSlices == Slices::levels ? static_cast<unsigned>(p.levels) : 1u);
    slice_sort_kernel<Shape, kSlices><<<grid, Shape::kThreads, bytes, stream>>>(a);
    return cudaGetLastError();
}

}  // namespace

BlockSorted block_sorted(const Problem &p) {
    const std::int64_t per_level = p.queries * p.points * 4, per_head = per_level * p.levels;
    const int row_bits = bits_for(p.value_len + 1);  // rows and the mark of corners outside
    // (i / span by multiplication needs span and i below 2^16; a head fits 20480 entries)
    const bool heads = per_head <= HeadSort::kCapacity && bits_for(per_head) + row_bits <= 32 &&
                       p.levels * p.points * 4 < (1 << 16);
    // Levels: a block's first thread checks every pair of levels for overlap, so at most 64.
    if (heads && per_level <= LevelSort::kCapacity && p.levels <= 64)
        return BlockSorted::levels;
    return heads ? BlockSorted::heads : BlockSorted::no;
}

cudaError_t sort_by_blocks(const Problem &p, const SortedScratch &s, cudaStream_t stream) {
    const auto per_level = static_cast<unsigned>(4 * p.points);
    const auto per_head = static_cast<unsigned>(4 * p.levels * p.points);
    if (s.block_sorted == BlockSorted::heads)
        return launch_slices<HeadSort, Slices::heads>(p, s, per_head, stream);
    if (const cudaError_t err = launch_slices<LevelSort, Slices::levels>(p, s, per_level, stream))
        return err;
    if (p.levels == 1)  // nothing to overlap
        return cudaSuccess;
    return launch_slices<HeadSort, Slices::heads_if_overlapping>(p, s, per_head, stream);
}

}  // namespace turbo_physai::kernels::msda::cuda::detail
