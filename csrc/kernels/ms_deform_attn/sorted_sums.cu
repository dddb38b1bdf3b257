// csrc/kernels/ms_deform_attn/sorted_sums.cu: sort and segmented sums of the sorted backward.
#include "ms_deform_attn/sorted_sums.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "ms_deform_attn/cuda_common.cuh"
#include "ms_deform_attn/run_sums.cuh"

namespace turbo_physai::kernels::msda::cuda::detail {
namespace {

/// Sorted entries per segment (segment_length): a group of lanes sums the runs (a key's entries)
/// of one segment. A run that crosses a segment's end is summed in pieces, which fixup_kernel
/// adds in segment order; so no run, however long, is one group's work, and the order of every
/// sum is fixed by the problem's sizes and the GPU's SM count.
///
/// Segments of 32 to 256 entries, as many as fill whole waves of the gather's resident groups
/// (kGatherBlocksPerSM blocks per SM of kThreads / R groups): a group's segment takes about the
/// same time as any other's, so a last partial wave would leave SMs idle (fixed 256-entry
/// segments gave the BEV shape 1.2 waves, the encoder 2.6).
constexpr int kGatherBlocksPerSM = 2;

int segment_length(std::int64_t entries, int lanes_per_row) {
    const std::int64_t groups = std::int64_t{std::max(1, multiprocessors())} *
                                kGatherBlocksPerSM * (kThreads / lanes_per_row);
    const std::int64_t waves = std::max<std::int64_t>(1, (entries + groups * 256 - 1) /
                                                             (groups * 256));
    const std::int64_t length = (entries + groups * waves - 1) / (groups * waves);
    return static_cast<int>(std::clamp<std::int64_t>(length, 32, 256));
}

/// What the sums read and write; kSlots (below) is 1 for corners, 4 for anchors. G: grad_output's
/// element type, V: grad_value's.
template <typename G, typename V>
struct GatherArgs {
    const unsigned *keys, *ids;  ///< sorted
    const float *coef;
    const G *grad_out;
    V *grad_value;
    float *pieces;  ///< per segment 2 x kSlots x D floats: [0] a run begun before it, [1] one
                    ///< going on after it
    const int *run_starts;  ///< anchors: runs begun before each segment
    int *run_of;
    float *partials;
    std::int64_t entries, none, channels, segments, segment, capacity;
    unsigned per_query;  ///< point index / this = the grad_output row
    Layout layout;
    Shape shape;
};

/// acc += VEC floats from `from`.
template <int VEC>
__device__ inline void add_floats(const float *from, float (&acc)[VEC]) {
    float part[VEC];
    load<float, VEC>(from, part);
#pragma unroll
    for (int v = 0; v < VEC; ++v)
        acc[v] += part[v];
}

/// kSlots sums of VEC channels from `to`, slot s at to + s * D.
template <int VEC, int kSlots>
__device__ inline void store_slots(float *to, std::int64_t D, std::int64_t c,
                                   const float (&acc)[kSlots][VEC]) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s)
        store<float, VEC>(to + s * D + c, acc[s]);
}
template <int VEC, int kSlots>
__device__ inline void add_slots(const float *from, std::int64_t D, std::int64_t c,
                                 float (&acc)[kSlots][VEC]) {
#pragma unroll
    for (int s = 0; s < kSlots; ++s)
        add_floats<VEC>(from + s * D + c, acc[s]);
}

/// A whole run's sums: corners, its grad_value row; anchors, run `id`'s partial sums (if within
/// the capacity) and, by the group's first lane, where they are.
template <typename G, typename V, int VEC, int kSlots>
__device__ inline void finish_run(const GatherArgs<G, V> &a, unsigned run, std::int64_t id,
                                  const float (&acc)[kSlots][VEC], std::int64_t c,
                                  bool first_lane) {
    const std::int64_t D = a.channels;
    if constexpr (kSlots == 1) {
        store<V, VEC>(a.grad_value + run * D + c, acc[0]);
    } else {
        const bool stored = id < a.capacity;
        if (stored)
            store_slots<VEC, kSlots>(a.partials + id * kSlots * D, D, c, acc);
        if (first_lane)
            a.run_of[run] = stored ? static_cast<int>(id) : kUnstoredRun;
    }
}

/// Sums each segment's runs in entry order. A run that ends in the segment and began in it is
/// finished (finish_run); its first run, if begun before, and its last, if going on after, are
/// left in `pieces`. Each step reads kPerLane * R entries (kPerLane per lane, coalesced: key,
/// payload, then corners' coefficients), so the dependent reads' latency is paid once per step;
/// their grad_output rows are requested 8 (anchors: 4) at a time before any is added.
template <typename G, typename V, int VEC, int kSlots>
__global__ void __launch_bounds__(kThreads, kGatherBlocksPerSM) gather_kernel(GatherArgs<G, V> a) {
    constexpr int kPerLane = 4;  // the step below adds u = 0..3 by hand
    const Group grp(a.layout);
    const GroupItems items(a.layout);
    const std::int64_t D = a.channels;
    const auto none = static_cast<unsigned>(a.none);
    for (std::int64_t seg = items.first; seg < a.segments; seg += items.step) {
        const std::int64_t begin = seg * a.segment, end = min(begin + a.segment, a.entries);
        float *piece = a.pieces + seg * 2 * kSlots * D;
        for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
            const std::int64_t c = grp.channel(chunk, VEC);
            const bool active = c < D;
            const unsigned first_key = a.keys[begin];
            const bool begun_before = begin > 0 && a.keys[begin - 1] == first_key;
            // anchors: the current run's index; the runs begun in this segment count from
            // run_starts[seg]
            Running<VEC, kSlots> sums{
                first_key, begun_before,
                kSlots == 1 ? 0 : a.run_starts[seg] - (begun_before ? 1 : 0), {}};
            const auto close = [&] {  // the run `sums.run` ended before the next entry
                if (sums.run >= none || !active)
                    return;
                if (sums.begun_before)
                    store_slots<VEC, kSlots>(piece, D, c, sums.acc);
                else
                    finish_run<G, V, VEC, kSlots>(a, sums.run, sums.id, sums.acc, c,
                                               chunk == 0 && grp.r == 0);
            };
            const auto add = [&](unsigned key, unsigned query, unsigned payload, float w) {
                add_held<G, VEC, kSlots, kSlots == 1 ? 8 : 4>(grp, a.grad_out, a.coef, D, c,
                                                              active, none, key, query, payload,
                                                              w, sums, close);
            };
            // Entries of a step, one per lane and u: keys and payloads, then (a dependent read,
            // corners only) coefficients. The next step's are requested while this one's rows
            // are added.
            const std::int64_t stride = kPerLane * grp.R;
            unsigned key[kPerLane], id_of[kPerLane];
            float w[kPerLane];
            const auto request = [&](std::int64_t i, unsigned (&k)[kPerLane],
                                     unsigned (&p)[kPerLane]) {
#pragma unroll
                for (int u = 0; u < kPerLane; ++u) {
                    const std::int64_t e = i + u * grp.R + grp.r;
                    k[u] = e < end ? a.keys[e] : none;
                    p[u] = k[u] < none ? a.ids[e] : 0u;
                }
            };
            const auto weigh = [&](const unsigned (&k)[kPerLane], const unsigned (&p)[kPerLane],
                                   float (&out)[kPerLane]) {
#pragma unroll
                for (int u = 0; u < kPerLane; ++u)
                    out[u] = kSlots == 1 && k[u] < none ? a.coef[p[u]] : 0.f;
            };
            const auto query = [&](unsigned payload) {
                return point_of<kSlots>(payload) / a.per_query;
            };
            request(begin, key, id_of);
            weigh(key, id_of, w);
            for (std::int64_t i = begin; i < end; i += stride) {
                unsigned next_key[kPerLane], next_id[kPerLane];
                float next_w[kPerLane];
                request(i + stride, next_key, next_id);
                add(key[0], query(id_of[0]), id_of[0], w[0]);
                add(key[1], query(id_of[1]), id_of[1], w[1]);
                weigh(next_key, next_id, next_w);
                add(key[2], query(id_of[2]), id_of[2], w[2]);
                add(key[3], query(id_of[3]), id_of[3], w[3]);
#pragma unroll
                for (int u = 0; u < kPerLane; ++u)
                    key[u] = next_key[u], id_of[u] = next_id[u], w[u] = next_w[u];
            }
            const bool goes_on = end < a.entries && a.keys[end] == sums.run;
            if (goes_on && !sums.begun_before) {
                if (sums.run < none && active)
                    store_slots<VEC, kSlots>(piece + kSlots * D, D, c, sums.acc);
            } else {
                close();
            }
        }
    }
}

/// Adds up the pieces of every run that crosses a segment end, in segment order, and finishes
/// it. The segment where the run began does it: its piece [1], then the next segments' [0]. An
/// anchors run finished here is the last one begun in its segment.
template <typename G, typename V, int VEC, int kSlots>
__global__ void __launch_bounds__(kThreads) fixup_kernel(GatherArgs<G, V> a) {
    const Group grp(a.layout);
    const GroupItems items(a.layout);
    const std::int64_t D = a.channels;
    const auto piece = [&](std::int64_t seg, int which) {
        return a.pieces + (seg * 2 + which) * kSlots * D;
    };
    for (std::int64_t seg = items.first; seg < a.segments; seg += items.step) {
        const std::int64_t begin = seg * a.segment, end = min(begin + a.segment, a.entries);
        const unsigned run = a.keys[end - 1];
        const bool goes_on = end < a.entries && a.keys[end] == run && run < a.none;
        const bool begun_before = a.keys[begin] == run && begin > 0 && a.keys[begin - 1] == run;
        if (!goes_on || begun_before)
            continue;
        const std::int64_t id = kSlots == 1 ? 0 : a.run_starts[seg + 1] - 1;
        for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
            const std::int64_t c = grp.channel(chunk, VEC);
            if (c >= D)
                break;
            float acc[kSlots][VEC] = {};
            add_slots<VEC, kSlots>(piece(seg, 1), D, c, acc);
            for (std::int64_t next = seg + 1;; ++next) {
                add_slots<VEC, kSlots>(piece(next, 0), D, c, acc);
                const std::int64_t next_end = min((next + 1) * a.segment, a.entries);
                const bool spans_next = a.keys[next_end - 1] == run;  // the whole of it
                if (!(spans_next && next_end < a.entries && a.keys[next_end] == run))
                    break;
            }
            finish_run<G, V, VEC, kSlots>(a, run, id, acc, c, chunk == 0 && grp.r == 0);
        }
    }
}

/// run_starts[seg] = the runs (of keys below `none`) that begin in segment seg, and 0 at
/// [segments]; a warp per segment.
__global__ void __launch_bounds__(kThreads)
    count_runs_kernel(const unsigned *keys, std::int64_t entries, unsigned none,
                      std::int64_t segments, std::int64_t segment, int *run_starts) {
    const int lane = threadIdx.x & 31;
    const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
    for (std::int64_t seg = (static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
         seg <= segments; seg += warps) {
        int count = 0;
        const std::int64_t begin = seg * segment, end = min(begin + segment, entries);
        for (std::int64_t i0 = begin; i0 < end; i0 += 32) {
            const std::int64_t i = i0 + lane;
            const unsigned k = i < end ? keys[i] : none;
            const bool starts = k < none && (i == 0 || keys[i - 1] != k);
            count += __popc(__ballot_sync(kFullMask, starts));
        }
        if (lane == 0)
            run_starts[seg] = count;
    }
}

/// Adds slot `slot` of run `key`'s terms straight from its entries: for runs whose partial sums
/// did not fit (kUnstoredRun), a binary search and a walk over the run.
template <typename G, typename V, int VEC>
__device__ void add_run_directly(const GatherArgs<G, V> &a, std::int64_t key, int slot,
                                 std::int64_t c, float (&acc)[VEC]) {
    std::int64_t lo = 0, hi = a.entries;
    while (lo < hi) {
        const std::int64_t mid = (lo + hi) / 2;
        if (a.keys[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (std::int64_t i = lo; i < a.entries && a.keys[i] == key; ++i) {
        const unsigned payload = a.ids[i];
        if (!(payload >> kSlotShift >> slot & 1u))
            continue;
        const unsigned point = payload & kPointMask;
        const float w = a.coef[kAnchorSlots * static_cast<std::int64_t>(point) + slot];
        float g[VEC];
        load<G, VEC>(a.grad_out + static_cast<std::int64_t>(point / a.per_query) * a.channels + c,
                     g);
#pragma unroll
        for (int v = 0; v < VEC; ++v)
            acc[v] += w * g[v];
    }
}

/// anchors: grad_value row (n, s, m) = for each level holding s (in level order), the slots
/// that land on it: slot k of the anchor k & 1 columns left and k >> 1 rows up. Writes every row.
template <typename G, typename V, int VEC>
__global__ void __launch_bounds__(kThreads) combine_kernel(GatherArgs<G, V> a) {
    extern __shared__ __align__(16) unsigned char smem[];
    Level *levels = level_table(smem, 0);
    const Shape &sh = a.shape;
    load_levels(sh, levels);
    __syncthreads();
    const Group grp(a.layout);
    const GroupItems items(a.layout);
    const std::int64_t D = sh.channels, rows = sh.batch * sh.value_len * sh.heads;
    const auto heads = static_cast<unsigned>(sh.heads), len = static_cast<unsigned>(sh.value_len);
    for (std::int64_t row = items.first; row < rows; row += items.step) {
        const auto at = static_cast<unsigned>(row);  // rows < 2^31 (fits_sorted)
        const unsigned m = at % heads, ns = at / heads, pos = ns % len, n = ns / len;
        const std::int64_t head = static_cast<std::int64_t>(n) * sh.heads + m;
        for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
            const std::int64_t c = grp.channel(chunk, VEC);
            if (c >= D)
                break;
            float acc[VEC] = {};
            for (int l = 0; l < sh.levels; ++l) {
                const Level lv = levels[l];
                const int local = static_cast<int>(pos) - lv.start;
                if (local < 0 || local >= lv.h * lv.w)
                    continue;
                const int y = local / lv.w, x = local - y * lv.w;
                const std::int64_t level_keys = anchor_key(head, l, 0, sh.levels, sh.value_len);
#pragma unroll
                for (int k = 0; k < kAnchorSlots; ++k) {
                    const int ax = x - (k & 1), ay = y - (k >> 1);
                    if (ax < 0 || ay < 0)
                        continue;
                    const std::int64_t key = level_keys + ay * lv.w + ax;
                    const int id = a.run_of[key];
                    if (id >= 0)
                        add_floats<VEC>(
                            a.partials + (id * std::int64_t{kAnchorSlots} + k) * D + c, acc);
                    else if (id == kUnstoredRun)
                        add_run_directly<G, V, VEC>(a, key, k, c, acc);
                }
            }
            store<V, VEC>(a.grad_value + row * D + c, acc);
        }
    }
}

std::size_t aligned_up(std::size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

std::size_t sorted_layout(const Problem &p, SortedScheme scheme, void *base, SortedScratch &s) {
    s.scheme = scheme;
    const bool anchors = s.scheme == SortedScheme::anchors;
    const std::int64_t points = sorted_points(p), rows = sorted_rows(p);
    s.entries = anchors ? points : 4 * points;
    s.keys_count = anchors ? rows * p.levels : rows;
    s.capacity = anchors ? std::min(points, rows) : 0;
    s.key_bits = bits_for(s.keys_count + 1);  // keys up to keys_count (`none`)
    s.block_sorted = anchors ? BlockSorted::no : block_sorted(p);
    // Segments are the gather's: block sorts have none. Its lanes per row when D allows kSumsVec
    // channels per lane (misaligned pointers would change it, and only how evenly the segments
    // fill the waves).
    s.segment = s.segments = 0;
    if (s.block_sorted == BlockSorted::no) {
        const Layout expected = layout_for(p, p.channels % kSumsVec == 0 ? kSumsVec : 1);
        s.segment = segment_length(s.entries, expected.lanes_per_row);
        s.segments = (s.entries + s.segment - 1) / s.segment;
    }
    std::size_t sort_bytes = 0, scan_bytes = 0;
    cub::DoubleBuffer<unsigned> sizes_only;
    if (s.block_sorted == BlockSorted::no)
        cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, sizes_only, sizes_only,
                                        static_cast<int>(s.entries), 0, s.key_bits);
    if (anchors)
        cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int *>(nullptr),
                                      static_cast<int *>(nullptr),
                                      static_cast<int>(s.segments + 1));
    s.temp_bytes = std::max(sort_bytes, scan_bytes);
    auto *at = static_cast<unsigned char *>(base);
    std::size_t used = 0;
    const auto take = [&](std::int64_t count, std::size_t size) {
        void *piece = at ? at + used : nullptr;
        used += aligned_up(static_cast<std::size_t>(count) * size);
        return piece;
    };
    const int slots = anchors ? kAnchorSlots : 1;
    // Block sorts read the recorded keys and coefficients, nothing else.
    const std::int64_t gathered = s.block_sorted == BlockSorted::no ? s.entries : 0;
    s.keys = static_cast<unsigned *>(take(s.entries, 4));
    s.ids = gathered ? static_cast<unsigned *>(take(gathered, 4)) : nullptr;
    s.coef = static_cast<float *>(take(4 * points, sizeof(float)));
    s.sorted_keys = static_cast<unsigned *>(take(gathered, 4));
    s.sorted_ids = static_cast<unsigned *>(take(gathered, 4));
    s.pieces = static_cast<float *>(take(s.segments * 2 * slots * p.channels, sizeof(float)));
    s.run_starts = static_cast<int *>(take(anchors ? s.segments + 1 : 0, sizeof(int)));
    s.run_of = static_cast<int *>(take(anchors ? s.keys_count : 0, sizeof(int)));
    s.partials =
        static_cast<float *>(take(s.capacity * kAnchorSlots * p.channels, sizeof(float)));
    s.temp = take(static_cast<std::int64_t>(s.temp_bytes), 1);
    return used;
}

template <typename G, typename V>
cudaError_t sum_sorted(const Problem &p, const SortedScratch &s, const G *grad_out,
                       V *grad_value, cudaStream_t stream) {
    const std::int64_t rows = sorted_rows(p);
    if (rows == 0 || p.channels == 0)
        return cudaSuccess;
    const bool anchors = s.scheme == SortedScheme::anchors;
    // corners: rows no entry touches stay zero, every other one is written once, by one group;
    // anchors: the combine pass writes every row.
    if (!anchors || s.entries == 0)
        if (const cudaError_t err = cudaMemsetAsync(
                grad_value, 0, static_cast<std::size_t>(rows * p.channels) * sizeof(V), stream))
            return err;
    if (s.entries == 0)
        return cudaSuccess;
    const bool wide = p.channels % kSumsVec == 0 && aligned(grad_out, kSumsVec * sizeof(G)) &&
                      aligned(grad_value, kSumsVec * sizeof(V));
    const Layout layout = layout_for(p, wide ? kSumsVec : 1);
    if (s.block_sorted != BlockSorted::no)
        return sum_by_blocks(p, s, layout, wide, grad_out, grad_value, stream);
    // The entries and their second buffers take turns as each pass's source and destination
    // (CUB's other form keeps a third copy in its temporary storage); CUB picks, on the host, the
    // buffer the last pass leaves them in.
    cub::DoubleBuffer<unsigned> keys(s.keys, s.sorted_keys), ids(s.ids, s.sorted_ids);
    std::size_t temp_bytes = s.temp_bytes;
    if (const cudaError_t err = cub::DeviceRadixSort::SortPairs(
            s.temp, temp_bytes, keys, ids, static_cast<int>(s.entries), 0, s.key_bits, stream))
        return err;
    const GatherArgs<G, V> a{keys.Current(), ids.Current(), s.coef, grad_out, grad_value,
                             s.pieces, s.run_starts, s.run_of, s.partials, s.entries,
                             s.keys_count, p.channels, s.segments, s.segment, s.capacity,
                             static_cast<unsigned>(p.levels * p.points * (anchors ? 1 : 4)),
                             layout, shape_of(p)};
    const int blocks = blocks_for(((s.segments << layout.log2_lanes) + 31) / 32);
    if (anchors) {
        static_assert(kNoRun == -1, "run_of starts as all 0xff bytes");
        if (const cudaError_t err = cudaMemsetAsync(
                s.run_of, 0xff, static_cast<std::size_t>(s.keys_count) * sizeof(int), stream))
            return err;
        count_runs_kernel<<<blocks_for(s.segments + 1), kThreads, 0, stream>>>(
            keys.Current(), s.entries, static_cast<unsigned>(s.keys_count), s.segments, s.segment,
            s.run_starts);
        temp_bytes = s.temp_bytes;
        if (const cudaError_t err =
                cub::DeviceScan::ExclusiveSum(s.temp, temp_bytes, s.run_starts, s.run_starts,
                                              static_cast<int>(s.segments + 1), stream))
            return err;
    }
    const auto run = [&](auto vec) {
        constexpr int VEC = decltype(vec)::value;
        if (anchors) {
            gather_kernel<G, V, VEC, kAnchorSlots><<<blocks, kThreads, 0, stream>>>(a);
            fixup_kernel<G, V, VEC, kAnchorSlots><<<blocks, kThreads, 0, stream>>>(a);
            const int row_blocks = blocks_for(((rows << layout.log2_lanes) + 31) / 32);
            combine_kernel<G, V, VEC>
                <<<row_blocks, kThreads, sizeof(Level) * p.levels, stream>>>(a);
        } else {
            gather_kernel<G, V, VEC, 1><<<blocks, kThreads, 0, stream>>>(a);
            fixup_kernel<G, V, VEC, 1><<<blocks, kThreads, 0, stream>>>(a);
        }
    };
    if (wide)
        run(std::integral_constant<int, kSumsVec>{});
    else
        run(std::integral_constant<int, 1>{});
    return cudaGetLastError();
}

#define TPA_SUM_SORTED(V, P)                                                                      \
    template cudaError_t sum_sorted(const Problem &, const SortedScratch &, const P *, V *,       \
                                    cudaStream_t);
TPA_MSDA_TYPE_PAIRS(TPA_SUM_SORTED)
#undef TPA_SUM_SORTED

}  // namespace turbo_physai::kernels::msda::cuda::detail

namespace turbo_physai::kernels::msda::cuda {

SortedScheme sorted_scheme(const Problem &p, SortedScheme asked) {
    if (asked != SortedScheme::automatic)
        return asked;
    return detail::sorted_points(p) < detail::sorted_rows(p) ? SortedScheme::corners
                                                             : SortedScheme::anchors;
}

bool fits_sorted(const Problem &p, SortedScheme scheme) {
    constexpr std::int64_t kLimit = std::int64_t{1} << 31;
    const std::int64_t points = detail::sorted_points(p), rows = detail::sorted_rows(p);
    if (points < 0 || rows >= kLimit)
        return false;
    if (sorted_scheme(p, scheme) == SortedScheme::corners)
        return points < kLimit / 4;
    // anchors: point indices in 28 bits, keys (rows x levels) and run indices in an int
    return points <= std::int64_t{detail::kPointMask} + 1 && p.levels < kLimit &&
           rows * p.levels < kLimit;
}

bool sorted_by_blocks(const Problem &p, SortedScheme scheme) {
    return fits_sorted(p, scheme) && sorted_scheme(p, scheme) == SortedScheme::corners &&
           detail::block_sorted(p) != detail::BlockSorted::no;
}

std::size_t sorted_scratch_bytes(const Problem &p, SortedScheme scheme) {
    detail::SortedScratch s{};
    return fits_sorted(p, scheme) ? detail::sorted_layout(p, sorted_scheme(p, scheme), nullptr, s)
                                  : 0;
}

}  // namespace turbo_physai::kernels::msda::cuda
