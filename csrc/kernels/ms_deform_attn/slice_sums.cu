// csrc/kernels/ms_deform_attn/slice_sums.cu: the corners scheme's sort and sums, by blocks.
//
// A head's (n, m) entries only key that head's rows, and with levels that do not overlap a
// level's entries only key that level's rows: sorting each head, or each (head, level), on its
// own groups the rows just as a sort of all entries does. When such a slice fits one block
// (decoders: a few hundred queries x P points x 4 corners per level), a block sorts it in shared
// memory: the row within the slice above the entry's index within it, in one 32-bit word,
// radix-sorted on the row bits only, which keeps entry order inside a row (the input is in that
// order). The block then sums the slice's runs into grad_value itself, reading coefficients and
// entries from shared memory: no sorted copy in global memory, no gather or fix-up launch. CUB's
// sort of all entries runs three device-wide passes whose cost at decoder sizes is latency, not
// bytes (12 us each at 300 K entries); this is one launch with every slice in parallel.
#include <cub/block/block_radix_sort.cuh>

#include <atomic>
#include <mutex>

#include "ms_deform_attn/cuda_common.cuh"
#include "ms_deform_attn/run_sums.cuh"
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
    // A level's blocks two per SM (64 registers, 64 KB of shared memory), a head's one (172 KB).
    static constexpr int kBlocksPerSM = kCapacity > 8192 ? 1 : 2;
    using Sort = cub::BlockRadixSort<unsigned, kThreads, kItems, cub::NullType, kRadixBits>;
    /// Shared memory: the sort's (then the sorted entries), the entries' coefficients, the
    /// groups' pieces (sum_slice: VEC floats per thread), the level table; 16-byte aligned.
    static constexpr std::size_t kSortBytes = (sizeof(typename Sort::TempStorage) + 15) / 16 * 16;
    static_assert(sizeof(typename Sort::TempStorage) >= kCapacity * sizeof(unsigned),
                  "the sorted entries take the sort's storage");
    template <int VEC>
    __host__ __device__ static constexpr std::size_t level_offset() {
        return kSortBytes + (kCapacity + std::size_t{kThreads} * VEC) * sizeof(float);
    }
};
// 5-bit digits: three passes over a decoder's 14-15 row bits (4-bit: four). Measured on the H200
// before the sums joined the sort, GPU time of the sort launches per call on the DETR / RT-DETR
// decoders (4800 entries per level):
// 512 x 10 11.9 / 42.2 us, 512 x 12 12.9 / 45.6, 256 x 20 with 6-bit digits 14.1 / 45.5, 1024 x 5
// 16.6 / 68.1; whole heads (19200 / 14400 entries) at 512 x 40: 26.9 / 58.5.
using LevelSort = SortShape<512, 10, 5>;
using HeadSort = SortShape<512, 40, 5>;

/// A block's slice: a level of a head (levels that overlap: the head's first block takes them
/// all, one after the other) or a whole head.
enum class Slices { levels, heads };

template <typename G, typename V>
struct SliceSumsArgs {
    Shape s;
    Layout layout;
    const unsigned *keys;  ///< per entry, in entry order: grad_value row or `none`
    const float *coef;     ///< per entry
    const G *grad_out;     ///< dense (N, Lq, M, D)
    V *grad_value;
    unsigned per_query;   ///< a head's entries per query (4 L P)
    unsigned span;        ///< a slice's entries per query (4 P, or 4 L P for heads)
    unsigned span_magic;  ///< ceil(2^32 / span): i / span = umulhi(i, magic), exact below 2^16
    unsigned none;
    int index_bits;  ///< bits of an entry's index in its slice
};

/// One block's slice: head (n, m), the grad_value rows first.. first + rows (value positions)
/// and the slice's entries, `count`, indexed 0.. in entry order.
struct Slice {
    unsigned n, m, queries, first, rows, count;
    unsigned heads, span_magic;

    /// The slice index's query: i / span.
    __device__ unsigned query(unsigned i) const { return __umulhi(i, span_magic); }
    /// grad_output's row of slice index i.
    __device__ unsigned grad_out_row(unsigned i) const {
        return (n * queries + query(i)) * heads + m;
    }
    /// grad_value's row of the slice's row `row`.
    __device__ std::int64_t grad_value_row(unsigned row) const {
        return static_cast<std::int64_t>(first + row) * heads + m;
    }
};

/// Sums the runs of sorted entries lo..hi of a slice (`sorted`: row above the slice index,
/// `coefs` by slice index; whole runs) into grad_value. Each group of R lanes takes an equal share
/// of the entries and sums its runs in entry order; a run that began in an earlier share leaves
/// its sum in `pieces` (a group's R x VEC floats), and the group where it began adds those after
/// a barrier, in share order. So no run, however many points land on its row, is one group's
/// work, and the order of every sum is fixed by the sizes and the SM count (parts) alone.
template <typename G, typename V, int VEC, bool kAccumulate>
__device__ void sum_slice(const SliceSumsArgs<G, V> &a, const Slice &sl, const unsigned *sorted,
                          const float *coefs, float *pieces, unsigned lo, unsigned hi) {
    // grad_output rows requested before any is added: 4 keeps a level block within 64 registers
    constexpr int kBatch = 4;
    const Group grp(a.layout);
    const unsigned groups = blockDim.x >> a.layout.log2_lanes;
    const unsigned g = threadIdx.x >> a.layout.log2_lanes;
    const unsigned share = (hi - lo + groups - 1) / groups;
    const unsigned begin = min(lo + g * share, hi), end = min(begin + share, hi);
    const unsigned index_mask = (1u << a.index_bits) - 1u;
    const auto row_at = [&](unsigned i) { return min(sorted[i] >> a.index_bits, sl.rows); };
    const std::int64_t D = a.s.channels;
    const int width = grp.R * VEC;  // floats in a group's piece
    for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
        const std::int64_t c = grp.channel(chunk, VEC);
        const bool active = c < D;
        const unsigned first_row = begin < end ? row_at(begin) : sl.rows;
        Running<VEC, 1> sums{first_row, begin > lo && row_at(begin - 1) == first_row, 0, {}};
        const auto finish = [&] {  // the whole run's sum into its grad_value row
            V *to = a.grad_value + sl.grad_value_row(sums.run) * D + c;
            if (kAccumulate)  // onto what this block wrote before (plain loads, not __ldg)
#pragma unroll
                for (int v = 0; v < VEC; ++v)
                    sums.acc[0][v] += to_float(to[v]);
            store<V, VEC>(to, sums.acc[0]);
        };
        const auto close = [&] {  // the run `sums.run` ended before the next entry
            if (sums.run >= sl.rows || !active)
                return;
            if (sums.begun_before)
                store<float, VEC>(pieces + g * width + grp.r * VEC, sums.acc[0]);
            else
                finish();
        };
        for (unsigned i = begin; i < end; i += grp.R) {
            const unsigned at = i + grp.r;
            unsigned row = sl.rows, query = 0;
            float w = 0.f;
            if (at < end) {
                const unsigned word = sorted[at], index = word & index_mask;
                row = min(word >> a.index_bits, sl.rows);
                w = coefs[index];
                query = sl.grad_out_row(index);
            }
            add_held<G, VEC, 1, kBatch>(grp, a.grad_out, nullptr, D, c, active, sl.rows, row,
                                        query, 0u, w, sums, close);
        }
        const bool goes_on = begin < end && end < hi && row_at(end) == sums.run;
        const bool finishes = goes_on && !sums.begun_before && sums.run < sl.rows;
        if (!(goes_on && !sums.begun_before))
            close();
        __syncthreads();  // every share's piece is written
        if (finishes) {
            for (unsigned next = g + 1;; ++next) {
                const float *piece = pieces + next * width + grp.r * VEC;
                if (active)
#pragma unroll
                    for (int v = 0; v < VEC; ++v)  // (shared memory: not `load`, an __ldg)
                        sums.acc[0][v] += piece[v];
                const unsigned next_end = min(lo + (next + 1) * share, hi);
                if (!(next_end < hi && row_at(next_end) == sums.run))
                    break;
            }
            if (active)
                finish();
        }
        __syncthreads();  // the pieces are read before the next chunk writes them
    }
}

/// Sorts the entries of one slice, head blockIdx.x and (by_level) level `level`, by row in shared
/// memory (entry order within a row, the corners outside the map last) and sums the runs of its
/// part `part` of `parts` into their grad_value rows (sum_slice; kAccumulate: onto them).
template <typename Shape, typename G, typename V, int VEC, bool kAccumulate>
__device__ void sort_and_sum(const SliceSumsArgs<G, V> &a, unsigned char *smem,
                             const Level *levels, bool by_level, unsigned level, unsigned part,
                             unsigned parts) {
    constexpr int kItems = Shape::kItems;
    auto &temp = *reinterpret_cast<typename Shape::Sort::TempStorage *>(smem);
    auto *sorted = reinterpret_cast<unsigned *>(smem);  // the sort's storage, once it is done
    auto *coefs = reinterpret_cast<float *>(smem + Shape::kSortBytes);
    float *pieces = coefs + Shape::kCapacity;
    const auto M = static_cast<unsigned>(a.s.heads), head = blockIdx.x, n = head / M;
    const auto queries = static_cast<unsigned>(a.s.queries);
    Slice sl{n, head - n * M, queries, n * static_cast<unsigned>(a.s.value_len),
             static_cast<unsigned>(a.s.value_len), queries * a.span, M, a.span_magic};
    if (by_level) {
        const Level lv = levels[level];
        sl.first += static_cast<unsigned>(lv.start);
        sl.rows = static_cast<unsigned>(lv.h * lv.w);
    }
    // entries run over (n, q, m, level, point, corner)
    const unsigned skip = by_level ? level * a.span : 0u;
    unsigned packed[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
        const unsigned i = threadIdx.x * kItems + j;  // blocked: input order = entry order
        packed[j] = ~0u;  // past the slice's entries: sorts after them all (row bits all ones)
        if (i < sl.count) {
            const unsigned q = sl.query(i);
            const unsigned entry = ((n * queries + q) * M + sl.m) * a.per_query + skip +
                                   (i - q * a.span);
            const unsigned key = a.keys[entry];
            coefs[i] = a.coef[entry];
            // `rows` marks a corner outside the map
            packed[j] = (key < a.none ? key / M - sl.first : sl.rows) << a.index_bits | i;
        }
    }
    typename Shape::Sort(temp).SortBlockedToStriped(packed, a.index_bits,
                                                 a.index_bits + bits_for(sl.rows + 1));
    __syncthreads();  // the sort's storage becomes `sorted`
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
        const unsigned rank = j * Shape::kThreads + threadIdx.x;  // striped
        if (rank < sl.count)
            sorted[rank] = packed[j];
    }
    __syncthreads();
    // This block's part of the slice: the runs that begin in its share of the entries.
    const auto run_start = [&](unsigned at) {  // the first run beginning at or after `at`
        if (at == 0 || at >= sl.count)
            return min(at, sl.count);
        const unsigned row = sorted[at - 1] >> a.index_bits;
        unsigned lo = at, hi = sl.count;  // sorted by row: a binary search
        while (lo < hi) {
            const unsigned mid = (lo + hi) / 2;
            if (sorted[mid] >> a.index_bits > row)
                hi = mid;
            else
                lo = mid + 1;
        }
        return lo;
    };
    sum_slice<G, V, VEC, kAccumulate>(a, sl, sorted, coefs, pieces,
                                      run_start(part * sl.count / parts),
                                      run_start((part + 1) * sl.count / parts));
}

/// Levels that share rows (the host does not read the level metadata, so only the device can
/// tell): the head's first block adds its levels one after the other, in level order, onto the
/// rows. Slow but rare: models' levels do not overlap (the CPU op refuses them). Not inlined, and
/// `a` by value (a reference would move the kernel's parameters to the stack), so that the common
/// path's registers do not pay for it.
template <typename Shape, typename G, typename V, int VEC>
__device__ __noinline__ void sum_levels_in_turn(const SliceSumsArgs<G, V> a, unsigned char *smem,
                                                const Level *levels) {
    for (int level = 0; level < a.s.levels; ++level) {
        sort_and_sum<Shape, G, V, VEC, true>(a, smem, levels, true, level, 0, 1);
        __syncthreads();  // a level's rows are written before the next adds onto them
    }
}

/// Block (head n * M + m, level blockIdx.y for Slices::levels, part blockIdx.z): sort_and_sum of
/// its slice and part. With few slices, each is sorted by several blocks that sum a part each,
/// so that every SM works.
template <typename Shape, Slices kSlices, typename G, typename V, int VEC>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kBlocksPerSM)
    slice_sums_kernel(SliceSumsArgs<G, V> a) {
    extern __shared__ __align__(16) unsigned char smem[];
    Level *levels = level_table(smem, Shape::template level_offset<VEC>());
    __shared__ bool overlapping;
    load_levels(a.s, levels);
    __syncthreads();
    if (kSlices == Slices::levels && threadIdx.x == 0) {
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
    if (kSlices == Slices::levels && overlapping) {  // the head's first block does it all
        if (blockIdx.y == 0 && blockIdx.z == 0)
            sum_levels_in_turn<Shape, G, V, VEC>(a, smem, levels);
        return;
    }
    sort_and_sum<Shape, G, V, VEC, false>(a, smem, levels, kSlices == Slices::levels,
                                          blockIdx.y, blockIdx.z, gridDim.z);
}

/// Lets `kKernel` take `bytes` of dynamic shared memory. The attribute holds for every later
/// launch on the device, so the driver is asked once per device and larger size, not per launch;
/// it only grows, so a launch on another thread never finds it lowered below what it needs.
template <auto kKernel>
cudaError_t allow_shared_memory(std::size_t bytes) {
    constexpr int kDevices = 64;
    static std::atomic<std::size_t> allowed[kDevices] = {};
    static std::mutex setting;
    int device = 0;
    if (const cudaError_t err = cudaGetDevice(&device))
        return err;
    if (device < 0 || device >= kDevices)
        return cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes));
    if (allowed[device].load(std::memory_order_acquire) >= bytes)
        return cudaSuccess;
    const std::lock_guard<std::mutex> lock(setting);
    if (allowed[device].load(std::memory_order_relaxed) >= bytes)
        return cudaSuccess;
    if (const cudaError_t err = cudaFuncSetAttribute(
            kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)))
        return err;
    allowed[device].store(bytes, std::memory_order_release);
    return cudaSuccess;
}

template <typename Shape, Slices kSlices, typename G, typename V, int VEC>
cudaError_t launch_slices(const Problem &p, const SortedScratch &s, const Layout &layout,
                          const G *grad_out, V *grad_value, unsigned span, cudaStream_t stream) {
    constexpr auto kernel = slice_sums_kernel<Shape, kSlices, G, V, VEC>;
    const std::size_t bytes = Shape::template level_offset<VEC>() + sizeof(Level) * p.levels;
    if (const cudaError_t err = allow_shared_memory<kernel>(bytes))
        return err;
    const SliceSumsArgs<G, V> a{shape_of(p),
                                layout,
                                s.keys,
                                s.coef,
                                grad_out,
                                grad_value,
                                static_cast<unsigned>(4 * p.levels * p.points),
                                span,
                                static_cast<unsigned>(((std::uint64_t{1} << 32) + span - 1) /
                                                      span),
                                static_cast<unsigned>(s.keys_count),
                                bits_for(p.queries * span)};
    // Parts per slice: as many as give each idle SM one block, at most kMaxParts. Each part
    // sorts the whole slice again, so two blocks of one slice on an SM are slower than one: DETR
    // decoder (64 slices), H200, this launch's GPU time: one part 29.1 us, two 21.1, three 29.4,
    // four (two blocks per SM) 30.7.
    constexpr std::int64_t kMaxParts = 4;
    const std::int64_t slices = p.batch * p.heads * (kSlices == Slices::levels ? p.levels : 1);
    const std::int64_t parts = std::clamp<std::int64_t>(multiprocessors() / slices, 1, kMaxParts);
    const dim3 grid(static_cast<unsigned>(p.batch * p.heads),
                    kSlices == Slices::levels ? static_cast<unsigned>(p.levels) : 1u,
                    static_cast<unsigned>(parts));
    kernel<<<grid, Shape::kThreads, bytes, stream>>>(a);
    return cudaGetLastError();
}

template <typename G, typename V, int VEC>
cudaError_t sum_slices(const Problem &p, const SortedScratch &s, const Layout &layout,
                       const G *grad_out, V *grad_value, cudaStream_t stream) {
    const auto per_level = static_cast<unsigned>(4 * p.points);
    const auto per_head = static_cast<unsigned>(4 * p.levels * p.points);
    if (s.block_sorted == BlockSorted::heads)
        return launch_slices<HeadSort, Slices::heads, G, V, VEC>(p, s, layout, grad_out,
                                                                 grad_value, per_head, stream);
    return launch_slices<LevelSort, Slices::levels, G, V, VEC>(p, s, layout, grad_out,
                                                               grad_value, per_level, stream);
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

template <typename G, typename V>
cudaError_t sum_by_blocks(const Problem &p, const SortedScratch &s, const Layout &layout,
                          bool wide, const G *grad_out, V *grad_value, cudaStream_t stream) {
    return wide ? sum_slices<G, V, kSumsVec>(p, s, layout, grad_out, grad_value, stream)
                : sum_slices<G, V, 1>(p, s, layout, grad_out, grad_value, stream);
}

#define TPA_SUM_BY_BLOCKS(V, P)                                                                   \
    template cudaError_t sum_by_blocks(const Problem &, const SortedScratch &, const Layout &,    \
                                       bool, const P *, V *, cudaStream_t);
TPA_MSDA_TYPE_PAIRS(TPA_SUM_BY_BLOCKS)
#undef TPA_SUM_BY_BLOCKS

}  // namespace turbo_physai::kernels::msda::cuda::detail
