// csrc/kernels/ms_deform_attn/ms_deform_attn.cpp: level checks, threading and ISA dispatch of MSDA.
#include "ms_deform_attn/ms_deform_attn.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ms_deform_attn/loops.h"
#include "turbo_physai/interrupt.h"
#include "turbo_physai/parallel.h"

namespace turbo_physai::kernels::msda {
namespace {

// Work handed to a thread at a time, in multiply-adds: large enough that the atomic chunk counter
// costs nothing, small enough that two cores stay balanced on a 300-query decoder call.
constexpr std::int64_t kChunkWork = 1 << 15;
// Bytes of grad_value zeroed per chunk.
constexpr std::int64_t kZeroChunkBytes = 1 << 18;

// The loops compiled once per instruction set, picked at load time by the resolver GCC emits
// (an ifunc): the wheel stays baseline x86-64, yet AVX2/AVX-512 machines run wide vectors. Results
// are deterministic on a machine; across machines the chosen clone (FMA or not) may change the
// last bits. `flatten` inlines loops.h into each clone, so no clone calls a baseline copy.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define TPA_ISA_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define TPA_ISA_CLONES
#endif

TPA_ISA_CLONES void forward_range(const Problem &pb, const Inputs<float> &in,
                                  const Strided<float, 4> &out, std::int64_t b, std::int64_t e) {
    detail::forward_rows(pb, in, out, b, e);
}
TPA_ISA_CLONES void forward_range(const Problem &pb, const Inputs<double> &in,
                                  const Strided<double, 4> &out, std::int64_t b, std::int64_t e) {
    detail::forward_rows(pb, in, out, b, e);
}
TPA_ISA_CLONES void zero_range(const Problem &pb, const Strided<float, 4> &grad_value,
                               std::int64_t b, std::int64_t e) {
    detail::zero_rows(pb, grad_value, b, e);
}
TPA_ISA_CLONES void zero_range(const Problem &pb, const Strided<double, 4> &grad_value,
                               std::int64_t b, std::int64_t e) {
    detail::zero_rows(pb, grad_value, b, e);
}
TPA_ISA_CLONES void backward_range(const Problem &pb, const Inputs<float> &in,
                                   const Strided<const float, 4> &grad_out,
                                   const Gradients<float> &gr, std::int64_t b, std::int64_t e) {
    detail::backward_tasks(pb, in, grad_out, gr, b, e);
}
TPA_ISA_CLONES void backward_range(const Problem &pb, const Inputs<double> &in,
                                   const Strided<const double, 4> &grad_out,
                                   const Gradients<double> &gr, std::int64_t b, std::int64_t e) {
    detail::backward_tasks(pb, in, grad_out, gr, b, e);
}

/// Zeroes the location and weight gradients, (n, q, m) rows at a time.
template <typename T>
void zero_points(const Problem &pb, const Gradients<T> &gr, int max_threads) {
    const std::int64_t M = pb.heads, Lq = pb.queries, P = pb.points;
    const auto L = static_cast<std::int64_t>(pb.levels.size());
    const auto &ls = gr.sampling_locations.stride;
    const auto &as = gr.attention_weights.stride;
    parallel_for(pb.batch * Lq * M, kChunkWork / std::max<std::int64_t>(1, L * P) + 1,
                 max_threads, [&](std::int64_t b, std::int64_t e) {
                     stop_point(pb.stop);
                     for (std::int64_t r = b; r < e; ++r) {
                         const std::int64_t n = r / (Lq * M), q = r / M % Lq, m = r % M;
                         T *loc = gr.sampling_locations.data + n * ls[0] + q * ls[1] + m * ls[2];
                         T *attn = gr.attention_weights.data + n * as[0] + q * as[1] + m * as[2];
                         for (std::int64_t l = 0; l < L; ++l)
                             for (std::int64_t p = 0; p < P; ++p) {
                                 loc[l * ls[3] + p * ls[4]] = T(0);
                                 loc[l * ls[3] + p * ls[4] + ls[5]] = T(0);
                                 attn[l * as[3] + p * as[4]] = T(0);
                             }
                     }
                 });
}

void require_dense_channels(std::int64_t channels, std::int64_t stride, const char *name) {
    if (channels > 1 && stride != 1)
        throw std::invalid_argument(std::string(name) + ": the channel (last) dimension must " +
                                    "have stride 1, got " + std::to_string(stride));
}

}  // namespace

std::vector<Level> make_levels(const std::int64_t *shapes,
                               std::array<std::int64_t, 2> shapes_stride,
                               const std::int64_t *starts, std::int64_t starts_stride,
                               std::int64_t num_levels, std::int64_t value_len) {
    // Bounds that keep H*W and the running sum far from int64 overflow.
    constexpr std::int64_t kMaxSide = std::int64_t(1) << 31;
    std::vector<Level> levels;
    levels.reserve(static_cast<std::size_t>(num_levels));
    std::int64_t expected_start = 0;
    for (std::int64_t l = 0; l < num_levels; ++l) {
        const std::int64_t h = shapes[l * shapes_stride[0]];
        const std::int64_t w = shapes[l * shapes_stride[0] + shapes_stride[1]];
        const std::int64_t start = starts[l * starts_stride];
        const std::string at = "[" + std::to_string(l) + "]";
        if (h < 0 || w < 0 || h >= kMaxSide || w >= kMaxSide)
            throw std::invalid_argument("spatial_shapes" + at + " = (" + std::to_string(h) + ", " +
                                        std::to_string(w) + "): expected 0 <= H, W < 2^31");
        if (start != expected_start)
            throw std::invalid_argument(
                "level_start_index" + at + " = " + std::to_string(start) + ", expected " +
                std::to_string(expected_start) +
                " (the sum of the H*W of spatial_shapes before it)");
        levels.push_back({h, w, start});
        expected_start += h * w;
        if (expected_start > value_len)
            break;  // reported below; stops the sum before it can overflow
    }
    if (expected_start != value_len)
        throw std::invalid_argument("value: expected S = " + std::to_string(expected_start) +
                                    " (the sum of H*W over spatial_shapes), got S = " +
                                    std::to_string(value_len));
    return levels;
}

template <typename T>
void forward(const Problem &pb, const Inputs<T> &in, Strided<T, 4> out, int max_threads) {
    // Nothing to write: return before any loop (a D = 0 value with 2^40 expanded queries ran for
    // minutes visiting points, issue 24). Sizes tested one by one: their product may overflow.
    if (pb.batch == 0 || pb.queries == 0 || pb.heads == 0 || pb.channels == 0)
        return;
    require_dense_channels(pb.channels, in.value.stride[3], "value");
    require_dense_channels(pb.channels, out.stride[3], "output");
    const std::int64_t row_work =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(pb.levels.size()) * pb.points * 4 *
                                      pb.channels);
    parallel_for(pb.batch * pb.queries * pb.heads, kChunkWork / row_work + 1, max_threads,
                 [&](std::int64_t b, std::int64_t e) { forward_range(pb, in, out, b, e); });
}

template <typename T>
void backward(const Problem &pb, const Inputs<T> &in, Strided<const T, 4> grad_out,
              const Gradients<T> &gr, int max_threads) {
    if (pb.batch == 0 || pb.heads == 0)
        return;  // every gradient is empty
    if (pb.channels == 0) {
        // grad_value is empty, the others are 0: no point needs a visit.
        zero_points(pb, gr, max_threads);
        return;
    }
    require_dense_channels(pb.channels, in.value.stride[3], "value");
    // An empty grad_output may have any strides (autograd's expanded ones of out.sum(), say).
    if (pb.queries > 0)
        require_dense_channels(pb.channels, grad_out.stride[3], "grad_output");
    require_dense_channels(pb.channels, gr.value.stride[3], "grad_value");
    const std::int64_t row_bytes =
        std::max<std::int64_t>(1, pb.heads * pb.channels * static_cast<std::int64_t>(sizeof(T)));
    parallel_for(pb.batch * pb.value_len, kZeroChunkBytes / row_bytes + 1, max_threads,
                 [&](std::int64_t b, std::int64_t e) { zero_range(pb, gr.value, b, e); });
    // One task per (n, m, level): see backward_tasks and the header for why this is exact.
    parallel_for(pb.batch * pb.heads * static_cast<std::int64_t>(pb.levels.size()), 1,
                 max_threads, [&](std::int64_t b, std::int64_t e) {
                     backward_range(pb, in, grad_out, gr, b, e);
                 });
}

template void forward<float>(const Problem &, const Inputs<float> &, Strided<float, 4>, int);
template void forward<double>(const Problem &, const Inputs<double> &, Strided<double, 4>, int);
template void backward<float>(const Problem &, const Inputs<float> &, Strided<const float, 4>,
                              const Gradients<float> &, int);
template void backward<double>(const Problem &, const Inputs<double> &, Strided<const double, 4>,
                               const Gradients<double> &, int);

}  // namespace turbo_physai::kernels::msda
