// csrc/kernels/ms_deform_attn/loops.h: the forward rows and backward tasks of one thread's range.
//
// Plain templates, always inlined into the per-ISA entry points of ms_deform_attn.cpp so that each
// instruction-set clone compiles its own copy of these loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ms_deform_attn/bilinear.h"
#include "ms_deform_attn/ms_deform_attn.h"
#include "ms_deform_attn/unusual.h"
#include "turbo_physai/interrupt.h"

namespace turbo_physai::kernels::msda::detail {

// Backward: sampling points located (and their rows requested) together before any is used.
// (Locating the next batch one step ahead, as the forward does with rows, measured slower here.)
constexpr int kBatch = 16;

/// A forward sampling point, ready to accumulate: its corner rows and attention * bilinear weights
/// (a negative count: a non-finite location or weight, unusual.h).
template <typename T>
struct Sample {
    int count;
    const T *value[4];
    T weight[4];
};

/// Locates the L*P sampling points of output row r = (n * Lq + q) * M + m into `out` and
/// requests their corner rows from memory.
template <typename T>
inline void prepare_row(const Problem &pb, const Inputs<T> &in, std::int64_t r, Sample<T> *out) {
    const std::int64_t D = pb.channels, M = pb.heads, Lq = pb.queries, P = pb.points;
    const auto &vs = in.value.stride;
    const auto &ls = in.sampling_locations.stride;
    const auto &as = in.attention_weights.stride;
    const std::int64_t n = r / (Lq * M), q = r / M % Lq, m = r % M;
    const T *value_nm = in.value.data + n * vs[0] + m * vs[2];
    const T *loc = in.sampling_locations.data + n * ls[0] + q * ls[1] + m * ls[2];
    const T *attn = in.attention_weights.data + n * as[0] + q * as[1] + m * as[2];
    Corners<T> c;
    for (const Level &lv : pb.levels) {
        const T *value_l = value_nm + lv.start * vs[1];
        for (std::int64_t p = 0; p < P; ++p, ++out) {
            corners_of<false>(loc[p * ls[4]], loc[p * ls[4] + ls[5]], lv.height, lv.width, vs[1],
                              c);
            const T a = attn[p * as[4]];
            if (c.count < 0 || !std::isfinite(a)) {
                unusual_sample(c, a, value_l, *out);
                continue;
            }
            out->count = c.count;
            for (int k = 0; k < c.count; ++k) {
                out->value[k] = value_l + c.offset[k];
                out->weight[k] = a * c.weight[k];
                prefetch(out->value[k], D, false);
            }
        }
        loc += ls[3];
        attn += as[3];
    }
}

/// Output rows r in [begin, end), r = (n * Lq + q) * M + m. Each row is summed in (level, point)
/// order by the one thread that owns it. Software-pipelined: the points of row r + 1 are located
/// and their rows requested before row r is summed, so memory latency overlaps the arithmetic.
template <typename T>
inline void forward_rows(const Problem &pb, const Inputs<T> &in, const Strided<T, 4> &out,
                         std::int64_t begin, std::int64_t end) {
    const std::int64_t D = pb.channels, M = pb.heads, Lq = pb.queries;
    const std::size_t LP = pb.levels.size() * static_cast<std::size_t>(pb.points);
    std::vector<Sample<T>> current(LP), next(LP);
    prepare_row(pb, in, begin, current.data());
    for (std::int64_t r = begin; r < end; ++r) {
        stop_point(pb.stop);
        if (r + 1 < end)
            prepare_row(pb, in, r + 1, next.data());
        const std::int64_t n = r / (Lq * M), q = r / M % Lq, m = r % M;
        T *o = out.data + n * out.stride[0] + q * out.stride[1] + m * out.stride[2];
        std::fill(o, o + D, T(0));
        for (std::size_t i = 0; i < LP; ++i) {
            if ((i & 255) == 255)  // a row of 2^16 points of wide channels runs for seconds
                stop_point(pb.stop);
            const Sample<T> &s = current[i];
            accumulate(o, s.value, s.weight, s.count, D);
        }
        current.swap(next);
    }
}

/// Zeroes grad_value rows r in [begin, end), r = n * S + s: all heads of a row at once, which is
/// one contiguous run when the heads are dense. Done in its own pass, over whole rows, because
/// zeroing each task's strided slice separately ran at a fraction of memset speed.
template <typename T>
inline void zero_rows(const Problem &pb, const Strided<T, 4> &grad_value, std::int64_t begin,
                      std::int64_t end) {
    const std::int64_t S = pb.value_len, M = pb.heads, D = pb.channels;
    const auto &gvs = grad_value.stride;
    stop_point(pb.stop);
    for (std::int64_t r = begin; r < end; ++r) {
        T *row = grad_value.data + r / S * gvs[0] + r % S * gvs[1];
        if (gvs[2] == D)
            std::fill(row, row + M * D, T(0));
        else
            for (std::int64_t m = 0; m < M; ++m)
                std::fill(row + m * gvs[2], row + m * gvs[2] + D, T(0));
    }
}

/// A backward sampling point: corners (offsets in rows, with derivatives), weight and rows.
template <typename T>
struct Point {
    Corners<T> c;
    T attn;
    const T *value[4];
    T *grad_value[4];
};

/// Backward tasks t in [begin, end), t = (n * M + m) * L + level, on a zeroed grad_value. A task
/// owns grad_value[n, rows of its level, m, :] and the (n, :, m, level) slices of the location
/// and weight gradients, and visits its (query, point) pairs in order.
template <typename T>
inline void backward_tasks(const Problem &pb, const Inputs<T> &in,
                           const Strided<const T, 4> &grad_out, const Gradients<T> &gr,
                           std::int64_t begin, std::int64_t end) {
    const std::int64_t D = pb.channels, M = pb.heads, Lq = pb.queries, P = pb.points;
    const auto L = static_cast<std::int64_t>(pb.levels.size());
    const auto &vs = in.value.stride;
    const auto &gvs = gr.value.stride;
    const auto &ls = in.sampling_locations.stride;
    const auto &as = in.attention_weights.stride;
    const auto &gls = gr.sampling_locations.stride;
    const auto &gas = gr.attention_weights.stride;
    const auto &gos = grad_out.stride;
    Point<T> batch[kBatch];
    for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t n = t / (M * L), m = t / L % M, l = t % L;
        const Level &lv = pb.levels[static_cast<std::size_t>(l)];
        const T *value_l = in.value.data + n * vs[0] + m * vs[2] + lv.start * vs[1];
        T *grad_value_l = gr.value.data + n * gvs[0] + m * gvs[2] + lv.start * gvs[1];
        const T *loc = in.sampling_locations.data + n * ls[0] + m * ls[2] + l * ls[3];
        const T *attn = in.attention_weights.data + n * as[0] + m * as[2] + l * as[3];
        T *grad_loc = gr.sampling_locations.data + n * gls[0] + m * gls[2] + l * gls[3];
        T *grad_attn = gr.attention_weights.data + n * gas[0] + m * gas[2] + l * gas[3];
        for (std::int64_t first = 0; first < Lq * P; first += kBatch) {
            stop_point(pb.stop);
            const int count = static_cast<int>(std::min<std::int64_t>(kBatch, Lq * P - first));
            std::int64_t qs[kBatch], ps[kBatch];
            for (std::int64_t i = 0, q = first / P, p = first % P; i < count; ++i) {
                qs[i] = q, ps[i] = p;
                if (++p == P)
                    p = 0, ++q;
            }
            for (int i = 0; i < count; ++i) {
                const std::int64_t q = qs[i], p = ps[i];
                const T *xy = loc + q * ls[1] + p * ls[4];
                Point<T> &pt = batch[i];
                corners_of<true>(xy[0], xy[ls[5]], lv.height, lv.width, 1, pt.c);
                pt.attn = attn[q * as[1] + p * as[4]];
                for (int k = 0; k < pt.c.count; ++k) {
                    pt.value[k] = value_l + pt.c.offset[k] * vs[1];
                    pt.grad_value[k] = grad_value_l + pt.c.offset[k] * gvs[1];
                    prefetch(pt.value[k], D, false);
                    prefetch(pt.grad_value[k], D, true);
                }
            }
            for (int i = 0; i < count; ++i) {
                const std::int64_t q = qs[i], p = ps[i];
                const Point<T> &pt = batch[i];
                const T *g = grad_out.data + n * gos[0] + q * gos[1] + m * gos[2];
                T *gxy = grad_loc + q * gls[1] + p * gls[4];
                const T *xy = loc + q * ls[1] + p * ls[4];
                if (pt.c.count < 0) {
                    nonfinite_location_gradients(xy[0], xy[ls[5]], lv.height, lv.width, pt.attn,
                                                 g, D, gxy, gls[5],
                                                 grad_attn + q * gas[1] + p * gas[4]);
                    continue;
                }
                T dot[4];
                dots(g, pt.value, pt.c.count, D, dot);
                T grad_a = 0, grad_x = 0, grad_y = 0;
                for (int k = 0; k < pt.c.count; ++k) {
                    scatter(g, pt.grad_value[k], pt.attn * pt.c.weight[k], D);
                    grad_a += pt.c.weight[k] * dot[k];
                    grad_x += pt.c.d_dx[k] * dot[k];
                    grad_y += pt.c.d_dy[k] * dot[k];
                }
                // d(pixel x)/d(loc x) = W, likewise H for y.
                gxy[0] = pt.attn * grad_x * static_cast<T>(lv.width);
                gxy[gls[5]] = pt.attn * grad_y * static_cast<T>(lv.height);
                grad_attn[q * gas[1] + p * gas[4]] = grad_a;
                if (!std::isfinite(pt.attn) && pt.c.count > 0)
                    nonfinite_weight_location_gradient(xy[0], xy[ls[5]], lv.height, lv.width,
                                                       value_l, vs[1], pt.attn, g, D, gxy,
                                                       gls[5]);
            }
        }
    }
}

}  // namespace turbo_physai::kernels::msda::detail
