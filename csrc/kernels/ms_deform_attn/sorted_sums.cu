// csrc/kernels/ms_deform_attn/sorted_sums.cu: sort and segmented sums of the sorted backward.
#include "ms_deform_attn/sorted_sums.cuh"

#include <cub/device/device_radix_sort.cuh>

#include "ms_deform_attn/cuda_common.cuh"

namespace turbo_physai::kernels::msda::cuda::detail {
namespace {

/// Sorted entries per segment (segment_length): a group of lanes sums the runs (a row's entries)
/// of one segment. A run that crosses a segment's end is summed in pieces, which fixup_kernel
/// adds in segment order; so no run, however long, is one group's work, and the order of every
/// sum is fixed by the problem's sizes and the GPU's SM count.
int segment_length(std::int64_t entries) {
    // About 64 groups' worth of segments per SM, 32 to 256 entries each.
    const std::int64_t target = std::max<std::int64_t>(1, std::int64_t{multiprocessors()} * 64);
    int length = 32;
    while (length < 256 && length * target < entries)
        length *= 2;
    return length;
}

template <typename T>
struct GatherArgs {
    const unsigned *keys, *ids;
    const float *coef;
    const T *grad_out;
    T *grad_value;
    float *pieces;  ///< per segment 2 x D floats: [0] a run begun before it, [1] one going on after
    std::int64_t entries, rows, channels, segments, segment;
    unsigned entries_per_query;  ///< L*P*4: entry index / this = the grad_output row
    Layout layout;
};

/// A group's part in the sorted sums: R lanes (lanes_per_row) of VEC channels, chunk by chunk.
struct Group {
    int r, R;
    unsigned mask;
    std::int64_t first, step;  ///< this group's first segment and the stride to its next

    __device__ explicit Group(const Layout &lay) {
        const int lane = threadIdx.x & 31;
        R = lay.lanes_per_row;
        r = lane & (R - 1);
        mask = R == 32 ? kFullMask : ((1u << R) - 1u) << (lane & ~(R - 1));
        first = (static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> lay.log2_lanes;
        step = static_cast<std::int64_t>(gridDim.x) * (kThreads >> lay.log2_lanes);
    }
};

/// Sums each segment's runs in entry order. A run that ends in the segment and began in it is
/// written to grad_value; its first run, if begun before, and its last, if going on after, are
/// left in `pieces`. Each step reads kPerLane * R entries (kPerLane per lane, coalesced: key,
/// payload, then coefficient), so the dependent reads' latency is paid once per step; their
/// grad_output rows are requested 8 at a time before any is added.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads, 2) gather_kernel(GatherArgs<T> a) {
    constexpr int kPerLane = 4;  // the step below adds u = 0..3 by hand
    const Group grp(a.layout);
    const std::int64_t D = a.channels;
    const auto none = static_cast<unsigned>(a.rows);
    for (std::int64_t seg = grp.first; seg < a.segments; seg += grp.step) {
        const std::int64_t begin = seg * a.segment, end = min(begin + a.segment, a.entries);
        float *piece = a.pieces + seg * 2 * D;
        for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
            const std::int64_t c = (static_cast<std::int64_t>(chunk) * grp.R + grp.r) * VEC;
            const bool active = c < D;
            float acc[VEC] = {};
            unsigned run = a.keys[begin];
            bool begun_before = begin > 0 && a.keys[begin - 1] == run;
            const auto close = [&] {  // the run `run` ended before the next entry
                if (run >= a.rows || !active)
                    return;
                if (begun_before)
                    store<float, VEC>(piece + c, acc);
                else
                    store<T, VEC>(a.grad_value + run * D + c, acc);
            };
            // Adds the R entries held one per lane (key, weight, grad_output row), in lane order.
            const auto add = [&](unsigned key, float w, unsigned query) {
                for (int j0 = 0; j0 < grp.R; j0 += 8) {
                    unsigned keys[8], queries[8];
                    float weights[8], rows[8][VEC];
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const unsigned k = __shfl_sync(grp.mask, key, j0 + j, grp.R);
                        keys[j] = j0 + j < grp.R ? k : none;
                        weights[j] = __shfl_sync(grp.mask, w, j0 + j, grp.R);
                        queries[j] = __shfl_sync(grp.mask, query, j0 + j, grp.R);
                    }
#pragma unroll
                    for (int j = 0; j < 8; ++j)  // no entry there: query 0, read but not added
                        if (active && keys[j] < none)
                            load<T, VEC>(a.grad_out + static_cast<std::int64_t>(queries[j]) * D + c,
                                         rows[j]);
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        if (keys[j] >= none)
                            continue;
                        if (keys[j] != run) {
                            close();
                            run = keys[j];
                            begun_before = false;
#pragma unroll
                            for (int v = 0; v < VEC; ++v)
                                acc[v] = 0.f;
                        }
                        if (active)
#pragma unroll
                            for (int v = 0; v < VEC; ++v)
                                acc[v] += weights[j] * rows[j][v];
                    }
                }
            };
            // Entries of a step, one per lane and u: keys and payloads, then (a dependent read)
            // coefficients. The next step's are requested while this one's rows are added.
            const std::int64_t stride = kPerLane * grp.R;
            unsigned key[kPerLane], id[kPerLane];
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
                    out[u] = k[u] < none ? a.coef[p[u]] : 0.f;
            };
            request(begin, key, id);
            weigh(key, id, w);
            for (std::int64_t i = begin; i < end; i += stride) {
                unsigned next_key[kPerLane], next_id[kPerLane];
                float next_w[kPerLane];
                request(i + stride, next_key, next_id);
                add(key[0], w[0], id[0] / a.entries_per_query);
                add(key[1], w[1], id[1] / a.entries_per_query);
                weigh(next_key, next_id, next_w);
                add(key[2], w[2], id[2] / a.entries_per_query);
                add(key[3], w[3], id[3] / a.entries_per_query);
#pragma unroll
                for (int u = 0; u < kPerLane; ++u)
                    key[u] = next_key[u], id[u] = next_id[u], w[u] = next_w[u];
            }
            const bool goes_on = end < a.entries && a.keys[end] == run;
            if (goes_on && !begun_before) {
                if (run < a.rows && active)
                    store<float, VEC>(piece + D + c, acc);
            } else {
                close();
            }
        }
    }
}

/// Adds up the pieces of every run that crosses a segment end, in segment order, and writes its
/// row. The segment where the run began does it: its piece [1], then the next segments' [0].
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) fixup_kernel(GatherArgs<T> a) {
    const Group grp(a.layout);
    const std::int64_t D = a.channels;
    for (std::int64_t seg = grp.first; seg < a.segments; seg += grp.step) {
        const std::int64_t begin = seg * a.segment, end = min(begin + a.segment, a.entries);
        const unsigned run = a.keys[end - 1];
        const bool goes_on = end < a.entries && a.keys[end] == run && run < a.rows;
        const bool begun_before = a.keys[begin] == run && begin > 0 && a.keys[begin - 1] == run;
        if (!goes_on || begun_before)
            continue;
        for (int chunk = 0; chunk < a.layout.chunks; ++chunk) {
            const std::int64_t c = (static_cast<std::int64_t>(chunk) * grp.R + grp.r) * VEC;
            if (c >= D)
                break;
            float acc[VEC], part[VEC];
            load<float, VEC>(a.pieces + seg * 2 * D + D + c, acc);
            for (std::int64_t next = seg + 1;; ++next) {
                load<float, VEC>(a.pieces + next * 2 * D + c, part);
#pragma unroll
                for (int v = 0; v < VEC; ++v)
                    acc[v] += part[v];
                const std::int64_t next_end = min((next + 1) * a.segment, a.entries);
                const bool spans_next = a.keys[next_end - 1] == run;  // the whole of it
                if (!(spans_next && next_end < a.entries && a.keys[next_end] == run))
                    break;
            }
            store<T, VEC>(a.grad_value + run * D + c, acc);
        }
    }
}

std::size_t aligned_up(std::size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

std::size_t sorted_layout(const Problem &p, void *base, SortedScratch &s) {
    s.entries = sorted_entries(p);
    s.rows = sorted_rows(p);
    s.key_bits = 1;
    while (s.key_bits < 32 && (std::int64_t{1} << s.key_bits) <= s.rows)
        ++s.key_bits;
    s.temp_bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, s.temp_bytes, static_cast<const unsigned *>(nullptr),
                                    static_cast<unsigned *>(nullptr),
                                    static_cast<const unsigned *>(nullptr),
                                    static_cast<unsigned *>(nullptr),
                                    static_cast<int>(s.entries), 0, s.key_bits);
    auto *at = static_cast<unsigned char *>(base);
    std::size_t used = 0;
    const auto take = [&](std::size_t bytes) {
        void *piece = at ? at + used : nullptr;
        used += aligned_up(bytes);
        return piece;
    };
    const auto entry_bytes = static_cast<std::size_t>(s.entries) * 4;
    s.keys = static_cast<unsigned *>(take(entry_bytes));
    s.ids = static_cast<unsigned *>(take(entry_bytes));
    s.coef = static_cast<float *>(take(entry_bytes));
    s.sorted_keys = static_cast<unsigned *>(take(entry_bytes));
    s.sorted_ids = static_cast<unsigned *>(take(entry_bytes));
    s.segment = segment_length(s.entries);
    s.segments = (s.entries + s.segment - 1) / s.segment;
    s.pieces = static_cast<float *>(
        take(static_cast<std::size_t>(s.segments * 2 * p.channels) * sizeof(float)));
    s.temp = take(s.temp_bytes);
    return used;
}

template <typename T>
cudaError_t sum_sorted(const Problem &p, const SortedScratch &s, const T *grad_out,
                       T *grad_value, cudaStream_t stream) {
    if (s.rows == 0 || p.channels == 0)
        return cudaSuccess;
    // Rows no entry touches stay zero; every other row is written once, by one group.
    if (const cudaError_t err = cudaMemsetAsync(
            grad_value, 0, static_cast<std::size_t>(s.rows * p.channels) * sizeof(T), stream))
        return err;
    if (s.entries == 0)
        return cudaSuccess;
    std::size_t temp_bytes = s.temp_bytes;
    if (const cudaError_t err = cub::DeviceRadixSort::SortPairs(
            s.temp, temp_bytes, s.keys, s.sorted_keys, s.ids, s.sorted_ids,
            static_cast<int>(s.entries), 0, s.key_bits, stream))
        return err;
    // 4 channels per lane for every type (8-byte loads of 16-bit rows): 8 lanes per row of 32
    // channels, so a step holds 32 entries (16 with 8 channels per lane, measured slower).
    constexpr int kVec = 4;
    const bool wide = p.channels % kVec == 0 && aligned(grad_out, kVec * sizeof(T)) &&
                      aligned(grad_value, kVec * sizeof(T));
    const Layout layout = layout_for(p, wide ? kVec : 1);
    const GatherArgs<T> a{s.sorted_keys, s.sorted_ids, s.coef, grad_out, grad_value, s.pieces,
                          s.entries,     s.rows,       p.channels, s.segments, s.segment,
                          static_cast<unsigned>(p.levels * p.points * 4), layout};
    const int blocks = blocks_for(((s.segments << layout.log2_lanes) + 31) / 32);
    if (wide) {
        gather_kernel<T, kVec><<<blocks, kThreads, 0, stream>>>(a);
        fixup_kernel<T, kVec><<<blocks, kThreads, 0, stream>>>(a);
    } else {
        gather_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(a);
        fixup_kernel<T, 1><<<blocks, kThreads, 0, stream>>>(a);
    }
    return cudaGetLastError();
}

template cudaError_t sum_sorted(const Problem &, const SortedScratch &, const float *, float *,
                                cudaStream_t);
template cudaError_t sum_sorted(const Problem &, const SortedScratch &, const __half *, __half *,
                                cudaStream_t);
template cudaError_t sum_sorted(const Problem &, const SortedScratch &, const __nv_bfloat16 *,
                                __nv_bfloat16 *, cudaStream_t);

}  // namespace turbo_physai::kernels::msda::cuda::detail

namespace turbo_physai::kernels::msda::cuda {

std::size_t sorted_scratch_bytes(const Problem &p) {
    detail::SortedScratch s{};
    return fits_sorted(p) ? detail::sorted_layout(p, nullptr, s) : 0;
}

}  // namespace turbo_physai::kernels::msda::cuda
