// benchmarks/experiments/msda_bench.cuh: what the standalone CUDA benchmarks of ms_deform_attn share
// (msda_reduction_floor.cu, msda_forward16_gather.cu, msda_classic.cu): issue 6's shapes, their
// sampling points' corner rows drawn as msda_cuda.py draws locations, error checks and
// CUDA-event medians.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

namespace msda_bench {

constexpr int kHeads = 8, kChannels = 32;

struct Shape {
    const char *name;
    int batch, queries, points;
    std::vector<std::pair<int, int>> levels;  // (H, W)
};

/// The first row of each level in value's S rows.
inline std::vector<int> level_starts(const Shape &s) {
    std::vector<int> start;
    int len = 0;
    for (const auto &[h, w] : s.levels) {
        start.push_back(len);
        len += h * w;
    }
    return start;
}

/// Each query's reference point (x, y) in [0, 1]: its own pixel centre when the queries are the
/// pixels of every level (an encoder; len: S), else drawn uniformly from `gen`.
inline std::vector<std::pair<float, float>> reference_points(const Shape &s, int len,
                                                             std::mt19937 &gen) {
    const std::vector<int> start = level_starts(s);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::vector<std::pair<float, float>> refs(s.queries);
    for (int q = 0; q < s.queries; ++q) {
        if (s.queries != len) {
            refs[q] = {unit(gen), unit(gen)};
            continue;
        }
        size_t l = 0;
        while (l + 1 < start.size() && q >= start[l + 1])
            ++l;
        const auto [h, w] = s.levels[l];
        const int i = q - start[l];
        refs[q] = {(i % w + 0.5f) / w, (i / w + 0.5f) / h};
    }
    return refs;
}

/// The 4 corner rows (in units of D elements) of every point, in the kernels' order. Top-left
/// corners uniform over each level, or (`local`) at the query's reference point plus a normal
/// offset of 2 pixels, as msda_cuda.py draws them: the reference is the query's own pixel centre
/// when the queries are the pixels (an encoder), else uniform and shared by the batch.
inline std::vector<int> corner_rows(const Shape &s, bool local, long &rows) {
    const std::vector<int> start = level_starts(s);
    const int len = start.back() + s.levels.back().first * s.levels.back().second;
    rows = static_cast<long>(s.batch) * len * kHeads;
    std::mt19937 gen(0);
    std::normal_distribution<float> offset(0.f, 2.f);
    const std::vector<std::pair<float, float>> refs = reference_points(s, len, gen);
    std::vector<int> out;
    out.reserve(static_cast<size_t>(s.batch) * kHeads * s.queries * s.levels.size() * s.points * 4);
    for (int n = 0; n < s.batch; ++n)
        for (int m = 0; m < kHeads; ++m)
            for (int q = 0; q < s.queries; ++q)
                for (size_t l = 0; l < s.levels.size(); ++l)
                    for (int p = 0; p < s.points; ++p) {
                        const auto [h, w] = s.levels[l];
                        int x = std::uniform_int_distribution<int>(0, w - 2)(gen);
                        int y = std::uniform_int_distribution<int>(0, h - 2)(gen);
                        if (local) {
                            const float px = refs[q].first * w - 0.5f + offset(gen);
                            const float py = refs[q].second * h - 0.5f + offset(gen);
                            x = std::clamp(static_cast<int>(std::floor(px)), 0, w - 2);
                            y = std::clamp(static_cast<int>(std::floor(py)), 0, h - 2);
                        }
                        for (int k = 0; k < 4; ++k) {
                            const int row = start[l] + (y + k / 2) * w + x + k % 2;
                            out.push_back((n * len + row) * kHeads + m);
                        }
                    }
    return out;
}

/// Exits with `what` and the error's name unless `err` is cudaSuccess.
inline void check(cudaError_t err, const char *what = "CUDA error") {
    if (err != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
        std::exit(1);
    }
}

/// Median over `reps` runs of `run()` (launches on the default stream), CUDA events around each.
template <typename F>
float median_ms(int reps, F &&run) {
    cudaEvent_t begin, end;
    check(cudaEventCreate(&begin));
    check(cudaEventCreate(&end));
    std::vector<float> ms(reps);
    for (float &t : ms) {
        check(cudaEventRecord(begin));
        run();
        check(cudaGetLastError());
        check(cudaEventRecord(end));
        check(cudaEventSynchronize(end));
        check(cudaEventElapsedTime(&t, begin, end));
    }
    check(cudaEventDestroy(begin));
    check(cudaEventDestroy(end));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

/// Issue 6's four shapes (M = 8 heads, D = 32 channels).
inline std::vector<Shape> issue6_shapes() {
    const std::vector<std::pair<int, int>> detr = {{100, 167}, {50, 84}, {25, 42}, {13, 21}};
    return {{"deformable_detr_encoder", 2, 22223, 4, detr},
            {"deformable_detr_decoder", 2, 300, 4, detr},
            {"rt_detr_decoder", 32, 300, 4, {{80, 80}, {40, 40}, {20, 20}}},
            {"bev", 1, 40000, 8, {{200, 200}}}};
}

}  // namespace msda_bench
