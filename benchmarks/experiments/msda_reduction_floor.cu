// benchmarks/experiments/msda_reduction_floor.cu: how long the memory traffic of MSDA alone takes on the GPU,
// for the corner rows of issue 6's shapes: the value gradient's float atomics (the floor of the
// default CUDA backward, which also loads value and grad_output and computes the other gradients)
// and the forward's corner loads (its floor: the kernel also reads and prepares the points).
//
//   nvcc -arch=sm_90a -O3 benchmarks/experiments/msda_reduction_floor.cu -o /tmp/floor
//   /tmp/floor [reps]
//   ncu --metrics lts__t_sectors_op_red.sum,lts__t_sectors_srcunit_tex_op_red.sum,\
//     smsp__inst_executed_op_global_red.sum /tmp/floor 1
//
// Each shape's sampling points get msda_cuda.py's two kinds of locations, uniform and "local"
// (corner_rows), in the order the kernels take them (head by head, queries, then L*P points),
// precomputed as row indices. Reductions: a group of 8 lanes adds a float4 to each of a point's
// 4 corner rows of D = 32 floats in a grad_value of (N, S, M, D), as the backward does, and
// nothing else. Loads: a group of 8 lanes sums a query's L*P points' corner rows (float4 loads,
// fixed weights) and writes its output row once, as the forward does. Prints the median time
// over `reps`.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "msda_bench.cuh"

namespace {

using namespace msda_bench;

__global__ void corner_reductions(float *grad, const int *rows, long points) {
    const long t = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
    const long point = t >> 3;  // 8 lanes per point: a 128-byte row is 8 float4s
    if (point >= points)
        return;
    for (int k = 0; k < 4; ++k) {
        float4 *row = reinterpret_cast<float4 *>(grad + static_cast<long>(rows[4 * point + k]) *
                                                            kChannels);
        atomicAdd(row + (t & 7), make_float4(1.f, 2.f, 3.f, 4.f));
    }
}

__global__ void corner_loads(const float *value, const int *rows, long queries, int points,
                             float *out) {
    const long t = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
    const long query = t >> 3;
    if (query >= queries)
        return;
    const int *corners = rows + 4 * query * points;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
    for (int j = 0; j < 4 * points; ++j) {  // up to 8 rows in flight per lane
        const float4 v = __ldg(reinterpret_cast<const float4 *>(
                                   value + static_cast<long>(corners[j]) * kChannels) +
                               (t & 7));
        acc.x += 0.25f * v.x, acc.y += 0.25f * v.y, acc.z += 0.25f * v.z, acc.w += 0.25f * v.w;
    }
    reinterpret_cast<float4 *>(out + query * kChannels)[t & 7] = acc;
}

/// One table row: both kernels on `s`'s corner rows, medians over `reps` launches.
void measure(const Shape &s, bool local, int reps) {
    long rows = 0;
    const std::vector<int> corners = corner_rows(s, local, rows);
    const long points = static_cast<long>(corners.size()) / 4;
    const long queries = static_cast<long>(s.batch) * kHeads * s.queries;
    const int per_query = static_cast<int>(s.levels.size()) * s.points;
    float *grad = nullptr, *out = nullptr;
    int *d_corners = nullptr;
    check(cudaMalloc(&grad, rows * kChannels * sizeof(float)));
    check(cudaMalloc(&out, queries * kChannels * sizeof(float)));
    check(cudaMalloc(&d_corners, corners.size() * sizeof(int)));
    check(cudaMemcpy(d_corners, corners.data(), corners.size() * sizeof(int),
                     cudaMemcpyHostToDevice));
    check(cudaMemset(grad, 0, rows * kChannels * sizeof(float)));
    const float median[2] = {
        median_ms(reps,
                  [&] {
                      corner_reductions<<<(points * 8 + 255) / 256, 256>>>(grad, d_corners,
                                                                           points);
                  }),
        // grad_value (written by the reductions) stands in for value
        median_ms(reps, [&] {
            corner_loads<<<(queries * 8 + 255) / 256, 256>>>(grad, d_corners, queries, per_query,
                                                            out);
        })};
    std::printf("| %s | %s | %ld | %.0f | %.4f | %.1f | %.4f | %.1f |\n", s.name,
                local ? "local" : "uniform", points * 4, rows * kChannels * 4 / 1e6, median[0],
                points * 4 / median[0] / 1e6, median[1], points * 4 / median[1] / 1e6);
    check(cudaFree(grad));
    check(cudaFree(out));
    check(cudaFree(d_corners));
}

}  // namespace

int main(int argc, char **argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
    std::printf("| shape | locations | corner rows | value MB | reductions only, ms "
                "| M rows per ms | loads only, ms | M rows per ms |\n"
                "|---|---|---|---|---|---|---|---|\n");
    for (const bool local : {false, true})
        for (const Shape &s : issue6_shapes())
            measure(s, local, reps);
    return 0;
}
