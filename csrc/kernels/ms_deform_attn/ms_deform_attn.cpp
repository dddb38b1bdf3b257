// csrc/kernels/ms_deform_attn/ms_deform_attn.cpp: forward and backward loops, threaded and vectorized.
#include "ms_deform_attn/ms_deform_attn.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ms_deform_attn/bilinear.h"
#include "turbo_physai/parallel.h"

namespace turbo_physai::kernels::msda {
namespace {

// Work handed to a thread at a time, in multiply-adds: large enough that the atomic chunk counter
// costs nothing, small enough that two cores stay balanced on a 300-query decoder call.
constexpr std::int64_t kChunkWork = 1 << 15;

void require_dense_channels(std::int64_t channels, std::int64_t stride, const char *name) {
    if (channels > 1 && stride != 1)
        throw std::invalid_argument(std::string(name) + ": the channel (last) dimension must have " +
                                    "stride 1, got " + std::to_string(stride));
}

}  // namespace

std::vector<Level> make_levels(const std::int64_t *shapes, std::array<std::int64_t, 2> shapes_stride,
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
                std::to_string(expected_start) + " (the sum of the H*W of spatial_shapes before it)");
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
    require_dense_channels(pb.channels, in.value.stride[3], "value");
    require_dense_channels(pb.channels, out.stride[3], "output");
    const std::int64_t D = pb.channels, M = pb.heads, Lq = pb.queries, P = pb.points;
    const auto L = static_cast<std::int64_t>(pb.levels.size());
    const auto &vs = in.value.stride;
    const auto &ls = in.sampling_locations.stride;
    const auto &as = in.attention_weights.stride;
    const std::int64_t row_work = std::max<std::int64_t>(1, L * P * 4 * D);

    // One task per output row (n, q, m): the row is summed by one thread in (level, point) order.
    parallel_for(pb.batch * Lq * M, kChunkWork / row_work + 1, max_threads,
                 [&](std::int64_t begin, std::int64_t end) {
        detail::Corners<T> c;
        const T *v[4];
        T w[4];
        for (std::int64_t r = begin; r < end; ++r) {
            const std::int64_t n = r / (Lq * M), q = r / M % Lq, m = r % M;
            T *o = out.data + n * out.stride[0] + q * out.stride[1] + m * out.stride[2];
            std::fill(o, o + D, T(0));
            const T *value_nm = in.value.data + n * vs[0] + m * vs[2];
            const T *loc = in.sampling_locations.data + n * ls[0] + q * ls[1] + m * ls[2];
            const T *attn = in.attention_weights.data + n * as[0] + q * as[1] + m * as[2];
            for (std::int64_t l = 0; l < L; ++l) {
                const Level &lv = pb.levels[static_cast<std::size_t>(l)];
                const T *value_l = value_nm + lv.start * vs[1];
                for (std::int64_t p = 0; p < P; ++p) {
                    const T *xy = loc + l * ls[3] + p * ls[4];
                    detail::corners_of(xy[0], xy[ls[5]], lv.height, lv.width, c);
                    const T a = attn[l * as[3] + p * as[4]];
                    for (int i = 0; i < c.count; ++i) {
                        v[i] = value_l + c.row[i] * vs[1];
                        w[i] = a * c.weight[i];
                    }
                    detail::accumulate(o, v, w, c.count, D);
                }
            }
        }
    });
}

template <typename T>
void backward(const Problem &pb, const Inputs<T> &in, Strided<const T, 4> grad_out,
              const Gradients<T> &gr, int max_threads) {
    require_dense_channels(pb.channels, in.value.stride[3], "value");
    require_dense_channels(pb.channels, grad_out.stride[3], "grad_output");
    require_dense_channels(pb.channels, gr.value.stride[3], "grad_value");
    const std::int64_t D = pb.channels, M = pb.heads, Lq = pb.queries, P = pb.points;
    const auto L = static_cast<std::int64_t>(pb.levels.size());
    const auto &vs = in.value.stride;
    const auto &gvs = gr.value.stride;
    const auto &ls = in.sampling_locations.stride;
    const auto &as = in.attention_weights.stride;
    const auto &gls = gr.sampling_locations.stride;
    const auto &gas = gr.attention_weights.stride;
    const auto &gos = grad_out.stride;

    // One task per (n, m, level): it owns grad_value[n, level rows, m, :] and the (n, :, m, level)
    // slices of the other two gradients (see the header for why this makes the backward exact).
    parallel_for(pb.batch * M * L, 1, max_threads, [&](std::int64_t begin, std::int64_t end) {
        detail::Corners<T> c;
        for (std::int64_t t = begin; t < end; ++t) {
            const std::int64_t n = t / (M * L), m = t / L % M, l = t % L;
            const Level &lv = pb.levels[static_cast<std::size_t>(l)];
            const T *value_l = in.value.data + n * vs[0] + m * vs[2] + lv.start * vs[1];
            T *grad_value_l = gr.value.data + n * gvs[0] + m * gvs[2] + lv.start * gvs[1];
            for (std::int64_t row = 0; row < lv.height * lv.width; ++row)
                std::fill(grad_value_l + row * gvs[1], grad_value_l + row * gvs[1] + D, T(0));
            for (std::int64_t q = 0; q < Lq; ++q) {
                const T *g = grad_out.data + n * gos[0] + q * gos[1] + m * gos[2];
                for (std::int64_t p = 0; p < P; ++p) {
                    const T *xy = in.sampling_locations.data + n * ls[0] + q * ls[1] + m * ls[2] +
                                  l * ls[3] + p * ls[4];
                    const T a = in.attention_weights.data[n * as[0] + q * as[1] + m * as[2] +
                                                          l * as[3] + p * as[4]];
                    detail::corners_of(xy[0], xy[ls[5]], lv.height, lv.width, c);
                    T grad_a = 0, grad_x = 0, grad_y = 0;
                    for (int i = 0; i < c.count; ++i) {
                        const T dot = detail::dot_and_scatter(g, value_l + c.row[i] * vs[1],
                                                              grad_value_l + c.row[i] * gvs[1],
                                                              a * c.weight[i], D);
                        grad_a += c.weight[i] * dot;
                        grad_x += c.d_dx[i] * dot;
                        grad_y += c.d_dy[i] * dot;
                    }
                    T *gxy = gr.sampling_locations.data + n * gls[0] + q * gls[1] + m * gls[2] +
                             l * gls[3] + p * gls[4];
                    // d(pixel x)/d(loc x) = W, likewise H for y.
                    gxy[0] = a * grad_x * static_cast<T>(lv.width);
                    gxy[gls[5]] = a * grad_y * static_cast<T>(lv.height);
                    gr.attention_weights.data[n * gas[0] + q * gas[1] + m * gas[2] + l * gas[3] +
                                              p * gas[4]] = grad_a;
                }
            }
        }
    });
}

template void forward<float>(const Problem &, const Inputs<float> &, Strided<float, 4>, int);
template void forward<double>(const Problem &, const Inputs<double> &, Strided<double, 4>, int);
template void backward<float>(const Problem &, const Inputs<float> &, Strided<const float, 4>,
                              const Gradients<float> &, int);
template void backward<double>(const Problem &, const Inputs<double> &, Strided<const double, 4>,
                               const Gradients<double> &, int);

}  // namespace turbo_physai::kernels::msda
