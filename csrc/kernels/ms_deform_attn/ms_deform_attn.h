// csrc/kernels/ms_deform_attn/ms_deform_attn.h: multi-scale deformable attention on the CPU.
//
// Layouts (SPEC §6): value (N,S,M,D), sampling_locations (N,Lq,M,L,P,2) with (x,y) in [0,1],
// attention_weights (N,Lq,M,L,P), output (N,Lq,M,D). Sampling is bilinear at loc*size-0.5 with
// zero padding, i.e. grid_sample(align_corners=False, padding_mode="zeros").
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

namespace turbo_physai::kernels::msda {

/// One feature level of `value`: an H x W map stored row-major from row `start` of S.
struct Level {
    std::int64_t height, width, start;
};

/// The sizes of one call; `levels` comes from make_levels, so it is consistent with value_len.
/// `stop` (optional): when set, the kernels throw turbo_physai::Interrupted at their next check
/// (every row, batch of points or chunk), leaving the outputs partly written.
struct Problem {
    std::int64_t batch, value_len, heads, channels, queries, points;
    std::vector<Level> levels;
    const std::atomic<bool> *stop = nullptr;
};

/// Reads spatial_shapes (L,2) = (H,W) and level_start_index (L,), both int64 with element strides,
/// and checks that levels are non-negative, start where the previous one ends and cover exactly
/// `value_len` rows. Throws std::invalid_argument naming the offending entry otherwise.
std::vector<Level> make_levels(const std::int64_t *shapes,
                               std::array<std::int64_t, 2> shapes_stride,
                               const std::int64_t *starts, std::int64_t starts_stride,
                               std::int64_t num_levels, std::int64_t value_len);

/// A tensor seen as a base pointer and element strides (outermost first); any strides are fine
/// except where a function requires dense channels.
template <typename T, int Rank>
struct Strided {
    T *data;
    std::array<std::int64_t, Rank> stride;
};

template <typename T>
struct Inputs {
    Strided<const T, 4> value;  ///< channel stride must be 1 (the vectorized dimension)
    Strided<const T, 6> sampling_locations;
    Strided<const T, 5> attention_weights;
};

template <typename T>
struct Gradients {
    Strided<T, 4> value;  ///< channel stride must be 1
    Strided<T, 6> sampling_locations;
    Strided<T, 5> attention_weights;
};

/// Grid_sample's semantics throughout, NaN included: a NaN or +-Inf location samples NaN, a
/// non-finite attention weight scales the bilinear sample (unusual.h). Nothing runs when the
/// output is empty (any of N, Lq, M, D is 0), whatever the other sizes.
///
/// Writes every element of `output` (channel stride 1); nothing is read from it. Each output row
/// is computed by one thread in a fixed order, so results do not depend on the thread count.
/// `max_threads` <= 0 uses every hardware thread. Instantiated for float and double.
template <typename T>
void forward(const Problem &problem, const Inputs<T> &in, Strided<T, 4> output, int max_threads);

/// Writes every element of the three gradients (nothing is read from them) from `grad_output`
/// (N,Lq,M,D), channel stride 1 unless it is empty. With D = 0 the location and weight gradients
/// are 0 (grid_sample sums over no channel) and no point is visited.
///
/// Always deterministic, bit for bit, whatever the thread count: work is split by (n, m, level),
/// and each such task owns its slice of grad_value (the rows of its level, its head) as well as its
/// slices of the location and weight gradients, so no two threads ever add into the same element
/// and every sum runs in a fixed order. No atomics, no per-thread copies of grad_value.
template <typename T>
void backward(const Problem &problem, const Inputs<T> &in, Strided<const T, 4> grad_output,
              const Gradients<T> &grads, int max_threads);

}  // namespace turbo_physai::kernels::msda
