// csrc/kernels/ms_deform_attn/run_sums.cuh: summing sorted entries run by run, shared by the
// device-wide gather (sorted_sums.cu) and the block sorts that sum their own slices
// (slice_sums.cu).
#pragma once

#include <cstdint>

#include "ms_deform_attn/cuda_common.cuh"
#include "ms_deform_attn/sorted_sums.cuh"

namespace turbo_physai::kernels::msda::cuda::detail {

/// Channels per lane of the sums when D and the pointers allow: 4 for every type (8-byte loads of
/// 16-bit rows), 8 lanes per row of 32 channels, so a gather step holds 32 entries (16 with 8
/// channels per lane, measured slower).
constexpr int kSumsVec = 4;

/// A group's part in the sorted sums: R lanes (lanes_per_row) of VEC channels, chunk by chunk.
struct Group {
    int r, R;
    unsigned mask;

    __device__ explicit Group(const Layout &lay) {
        const int lane = threadIdx.x & 31;
        R = lay.lanes_per_row;
        r = lane & (R - 1);
        mask = R == 32 ? kFullMask : ((1u << R) - 1u) << (lane & ~(R - 1));
    }
    /// The first channel of this lane in `chunk`.
    __device__ std::int64_t channel(int chunk, int vec) const {
        return (static_cast<std::int64_t>(chunk) * R + r) * vec;
    }
};

/// A grid-stride loop of the device-wide passes (gather, fixup: segments; combine: grad_value
/// rows), one item per group of R lanes of kThreads-thread blocks: this group's first item and the
/// stride to its next.
struct GroupItems {
    std::int64_t first, step;

    __device__ explicit GroupItems(const Layout &lay)
        : first((static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> lay.log2_lanes),
          step(static_cast<std::int64_t>(gridDim.x) * (kThreads >> lay.log2_lanes)) {}
};

/// An entry's point (its coefficients' index) and the slots it adds to (corners: its one).
template <int kSlots>
__device__ inline unsigned point_of(unsigned payload) {
    return kSlots == 1 ? payload : payload & kPointMask;
}
template <int kSlots>
__device__ inline unsigned slots_of(unsigned payload) {
    return kSlots == 1 ? 1u : payload >> kSlotShift;
}

template <int kSlots>
__device__ inline void coefficients(const float *coef, unsigned point, float (&w)[kSlots]) {
    if constexpr (kSlots == kAnchorSlots) {  // a float4 per point
        const float4 c = reinterpret_cast<const float4 *>(coef)[point];
        w[0] = c.x, w[1] = c.y, w[2] = c.z, w[3] = c.w;
    } else {
        w[0] = coef[point];
    }
}

/// A group's sums over consecutive sorted entries: the current run's key, whether it began
/// before the group's first entry, its index (anchors: runs counted from a known start) and its
/// kSlots sums of VEC channels.
template <int VEC, int kSlots>
struct Running {
    unsigned run;
    bool begun_before;
    std::int64_t id;
    float acc[kSlots][VEC];

    __device__ void start(unsigned key) {
        run = key;
        begun_before = false;
        ++id;
#pragma unroll
        for (int s = 0; s < kSlots; ++s)
#pragma unroll
            for (int v = 0; v < VEC; ++v)
                acc[s][v] = 0.f;
    }
};

/// Adds the R entries held one per lane of the group (key, grad_output row, payload and, corners,
/// coefficient), in lane order, kBatch rows requested before any is added; `close()` ends the
/// current run where the key changes. Anchors read their four coefficients here (the group's
/// lanes share the load) instead of holding them across steps: registers. A key of `none` or
/// more adds nothing, and a slot outside the map adds nothing (0 * Inf would be NaN).
template <typename G, int VEC, int kSlots, int kBatch, typename Close>
__device__ inline void add_held(const Group &grp, const G *grad_out, const float *coef,
                                std::int64_t D, std::int64_t c, bool active, unsigned none,
                                unsigned key, unsigned query, unsigned payload, float w,
                                Running<VEC, kSlots> &sums, const Close &close) {
    for (int j0 = 0; j0 < grp.R; j0 += kBatch) {
        unsigned keys[kBatch], queries[kBatch], payloads[kBatch];
        float weights[kBatch][kSlots], rows[kBatch][VEC];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const unsigned k = __shfl_sync(grp.mask, key, j0 + j, grp.R);
            keys[j] = j0 + j < grp.R ? k : none;
            queries[j] = __shfl_sync(grp.mask, query, j0 + j, grp.R);
            if constexpr (kSlots == 1)
                weights[j][0] = __shfl_sync(grp.mask, w, j0 + j, grp.R);
            else
                payloads[j] = __shfl_sync(grp.mask, payload, j0 + j, grp.R);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {  // no entry there: nothing read
            if (!active || keys[j] >= none)
                continue;
            load<G, VEC>(grad_out + static_cast<std::int64_t>(queries[j]) * D + c, rows[j]);
            if constexpr (kSlots > 1)
                coefficients<kSlots>(coef, point_of<kSlots>(payloads[j]), weights[j]);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            if (keys[j] >= none)
                continue;
            if (keys[j] != sums.run) {
                close();
                sums.start(keys[j]);
            }
            if (!active)
                continue;
#pragma unroll
            for (int s = 0; s < kSlots; ++s)
                if (slots_of<kSlots>(payloads[j]) >> s & 1u)
#pragma unroll
                    for (int v = 0; v < VEC; ++v)
                        sums.acc[s][v] += weights[j][s] * rows[j][v];
        }
    }
}

}  // namespace turbo_physai::kernels::msda::cuda::detail
