// benchmarks/experiments/msda_forward16_gather.cu: the MSDA forward's gather of 16-bit value rows on the GPU,
// two ways, on issue 6's shapes: with CUDA cores (what the kept kernel does: a lane loads 8
// channels of a corner row, converts each to float and adds weight * value) and with tensor cores
// (rows loaded the same way, transposed in registers by `movmatrix`, multiplied by the corners'
// weights in `mma.m16n8k16` with float32 accumulation), with value laid out (N, S, M, D) as the
// op takes it and (N, M, S, D). The tensor cores take the conversion and multiply-add per element
// off the issue slots; on the H200 they were slower all the same, the gather being bound by the
// L1 (BENCHMARKS.md, "tensor cores on whole rows").
//
//   nvcc -std=c++17 -arch=sm_90a -O3 -I csrc/kernels benchmarks/experiments/msda_forward16_gather.cu \
//     -o /tmp/gather16
//   /tmp/gather16 [reps]
//
// Points are precomputed (corner rows as msda_bench.cuh draws them, random bilinear and
// attention weights), so this times the gather alone, without the kernels' point preparation.
// float32 rows through CUDA cores are timed too, for the 16-bit speed-up. Each kernel's output is
// checked against a float64 sum of the same rounded inputs on a sample of queries.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ms_deform_attn/cuda_common.cuh"
#include "msda_bench.cuh"

namespace {

using namespace msda_bench;
using turbo_physai::kernels::msda::cuda::detail::from_float;
using turbo_physai::kernels::msda::cuda::detail::to_float;

template <typename T>
__device__ inline float widen(std::uint16_t bits) {
    if constexpr (std::is_same_v<T, __half>)
        return to_float(__ushort_as_half(bits));
    else
        return to_float(__ushort_as_bfloat16(bits));
}

/// CUDA cores: groups of R = 32 / (D / VEC) lanes gather a query's points (every G-th one), as
/// the kept forward kernel's gather loop does; `rows` per warp as many queries as 32 table
/// entries hold. float32: VEC = 4, 16-bit: VEC = 8 (16-byte loads either way).
template <typename T>
__global__ void gather_cuda_cores(const T *value, const int4 *rows, const float4 *weights,
                                  long queries, int per_query, int rows_per_warp, float *out) {
    constexpr int kVec = 16 / sizeof(T), kLanesPerRow = kChannels / kVec;
    const int lane = threadIdx.x & 31, group = lane / kLanesPerRow, r = lane % kLanesPerRow;
    const int groups_per_row = 32 / kLanesPerRow / rows_per_warp;
    const long warp = (blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x) >> 5;
    const long q = warp * rows_per_warp + group / groups_per_row;
    const int sub = group % groups_per_row;
    float acc[kVec] = {};
    if (q < queries) {
        for (int j = sub; j < per_query; j += groups_per_row) {
            const int4 row = rows[q * per_query + j];
            const float4 w = weights[q * per_query + j];
            const int rk[4] = {row.x, row.y, row.z, row.w};
            const float wk[4] = {w.x, w.y, w.z, w.w};
            uint4 raw[4];
#pragma unroll
            for (int k = 0; k < 4; ++k)
                raw[k] = __ldg(reinterpret_cast<const uint4 *>(
                                   value + static_cast<long>(rk[k]) * kChannels) + r);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const unsigned words[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
#pragma unroll
                for (int i = 0; i < kVec; ++i) {
                    float v;
                    if constexpr (sizeof(T) == 4)
                        v = __uint_as_float(words[i]);
                    else
                        v = widen<T>(static_cast<std::uint16_t>(words[i / 2] >> (16 * (i & 1))));
                    acc[i] += wk[k] * v;
                }
            }
        }
    }
    for (int offset = kLanesPerRow; offset < kLanesPerRow * groups_per_row; offset <<= 1)
#pragma unroll
        for (int i = 0; i < kVec; ++i)
            acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], offset);
    if (q < queries && sub == 0)
#pragma unroll
        for (int i = 0; i < kVec; ++i)
            out[q * kChannels + r * kVec + i] = acc[i];
}

__device__ inline unsigned transpose(unsigned x) {
    unsigned y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

template <typename T>
__device__ inline void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (std::is_same_v<T, __half>)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Tensor cores: a warp computes 4 queries, one point of each per step. Step j: D (channels x 8)
/// += A (channels x 16 corners) * B (16 corners x 8), K = the 4 queries' 4 corners, B's columns
/// each query's weights split into a 16-bit high and low part (hi + lo keeps ~22 bits of the
/// float32 weight for float16, 16 for bfloat16), so column pair t of D sums query t.
/// Lane l = 4g + t loads channels 8t..8t+7 of corner g of the first and of the last 8 corners
/// (16-byte loads, as the CUDA-core gather); `movmatrix` turns its 4 words into A's layout, where
/// row g of m-tile mt is channel 8(g/2) + 4mt + g%2 and row g + 8 is that + 2.
/// `halves[point]`: {hi01, hi23, lo01, lo23}, the weights of corners (0,1) and (2,3) packed.
template <typename T>
__global__ void gather_tensor_cores(const T *value, const int *rows, const uint4 *halves,
                                    long queries, int per_query, float *out) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long q0 = ((blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x) >> 5) * 4;
    const long load_q[2] = {q0 + g / 4, q0 + 2 + g / 4};  // the queries of the lane's corners
    const long b_q = q0 + g / 2;                          // the query of the lane's B column
    // Which of B's two registers holds the lane's weights: k = 2t, 2t+1 belong to query t/2, k
    // = 2t+8, 2t+9 to query 2 + t/2; column g to query g/2.
    const bool low_k = g / 2 == t / 2, high_k = g / 2 == 2 + t / 2;
    const int half_word = (g & 1) * 2 + (t & 1);
    float acc[2][4] = {};
    for (int j = 0; j < per_query; ++j) {
        unsigned a[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = load_q[h] < queries ? rows[(load_q[h] * per_query + j) * 4 + (g & 3)]
                                                : 0;
            const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(
                                        value + static_cast<long>(row) * kChannels) + t);
            a[h][0] = raw.x, a[h][1] = raw.y, a[h][2] = raw.z, a[h][3] = raw.w;
        }
        unsigned w = 0;
        if ((low_k || high_k) && b_q < queries)
            w = reinterpret_cast<const unsigned *>(halves + b_q * per_query + j)[half_word];
        const unsigned b0 = low_k ? w : 0u, b1 = high_k ? w : 0u;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const unsigned frag[4] = {transpose(a[0][2 * mt]), transpose(a[0][2 * mt + 1]),
                                      transpose(a[1][2 * mt]), transpose(a[1][2 * mt + 1])};
            mma<T>(acc[mt], frag, b0, b1);
        }
    }
    const long q = q0 + t;
    if (q < queries)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const int c = 8 * (g / 2) + 4 * mt + (g & 1);
            out[q * kChannels + c] = acc[mt][0] + acc[mt][1];
            out[q * kChannels + c + 2] = acc[mt][2] + acc[mt][3];
        }
}

template <typename T>
std::uint16_t bits(T v) {
    std::uint16_t b;
    std::memcpy(&b, &v, 2);
    return b;
}

/// A point's weights as B's packed 16-bit high and low parts.
template <typename T>
uint4 split_halves(const float (&w)[4]) {
    unsigned hi[2], lo[2];
    for (int p = 0; p < 2; ++p) {
        std::uint16_t h[2], l[2];
        for (int e = 0; e < 2; ++e) {
            const T high = from_float<T>(w[2 * p + e]);
            h[e] = bits(high);
            l[e] = bits(from_float<T>(w[2 * p + e] - to_float(high)));
        }
        hi[p] = h[0] | static_cast<unsigned>(h[1]) << 16;
        lo[p] = l[0] | static_cast<unsigned>(l[1]) << 16;
    }
    return make_uint4(hi[0], hi[1], lo[0], lo[1]);
}

struct Inputs {
    std::vector<int> corners;  // 4 per point
    std::vector<float> weights;  // 4 per point
    std::vector<float> value;  // N*S*M*D, not yet rounded
    long queries = 0;
    int per_query = 0;
};

/// `head_major`: value laid out (N, M, S, D) instead of (N, S, M, D), so that a point's corners
/// (x0, y) and (x0 + 1, y) are neighbouring rows (one 128-byte line for 16-bit rows of D = 32 when
/// x0 is even).
Inputs inputs_for(const Shape &s, bool local, bool head_major) {
    Inputs in;
    long rows = 0;
    in.corners = corner_rows(s, local, rows);
    if (head_major) {
        const long len = rows / s.batch / kHeads;
        for (int &r : in.corners) {
            const long n = r / kHeads / len, pos = r / kHeads % len, m = r % kHeads;
            r = static_cast<int>((n * kHeads + m) * len + pos);
        }
    }
    in.queries = static_cast<long>(s.batch) * kHeads * s.queries;
    in.per_query = static_cast<int>(s.levels.size()) * s.points;
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::normal_distribution<float> normal(0.f, 1.f);
    in.weights.resize(in.corners.size());
    for (size_t p = 0; p < in.corners.size() / 4; ++p) {
        const float fx = unit(gen), fy = unit(gen), a = 2.f * unit(gen) / in.per_query;
        const float w[4] = {(1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx};
        for (int k = 0; k < 4; ++k)
            in.weights[4 * p + k] = a * w[k];
    }
    in.value.resize(static_cast<size_t>(rows) * kChannels);
    for (float &v : in.value)
        v = normal(gen);
    return in;
}

/// Largest error of `out` against the float64 sum over every 97th query, over the largest |sum|.
template <typename T>
double relative_error(const Inputs &in, const std::vector<float> &out) {
    double worst = 0, largest = 0;
    for (long q = 0; q < in.queries; q += 97)
        for (int c = 0; c < kChannels; ++c) {
            double sum = 0;
            for (int j = 0; j < in.per_query; ++j)
                for (int k = 0; k < 4; ++k) {
                    const size_t e = (q * in.per_query + j) * 4 + k;
                    const float v =
                        to_float(from_float<T>(in.value[in.corners[e] * kChannels + c]));
                    sum += static_cast<double>(in.weights[e]) * v;
                }
            worst = std::max(worst, std::abs(out[q * kChannels + c] - sum));
            largest = std::max(largest, std::abs(sum));
        }
    return worst / largest;
}

struct Timing {
    float ms;
    double error;
};

/// Runs one gather `reps` times on a poisoned output; its median and checked error.
template <typename T, typename F>
Timing run(const Inputs &in, float *d_out, int reps, F &&launch) {
    const size_t out_bytes = in.queries * kChannels * sizeof(float);
    check(cudaMemset(d_out, 0xff, out_bytes));  // NaN: a row the kernel misses fails the check
    const float ms = median_ms(reps, launch);
    std::vector<float> out(in.queries * kChannels);
    check(cudaMemcpy(out.data(), d_out, out_bytes, cudaMemcpyDeviceToHost));
    return {ms, relative_error<T>(in, out)};
}

template <typename T>
T *device_value(const Inputs &in) {
    std::vector<T> v(in.value.size());
    std::transform(in.value.begin(), in.value.end(), v.begin(), from_float<T>);
    T *d = nullptr;
    check(cudaMalloc(&d, v.size() * sizeof(T)));
    check(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

int rows_per_warp(int lanes_per_row, int per_query) {
    int rows = 1;
    while (rows * 2 * lanes_per_row <= 32 && rows * 2 * per_query <= 32)
        rows *= 2;
    return rows;
}

template <typename T>
Timing cuda_cores(const Inputs &in, const int4 *rows, const float4 *weights, float *out,
                  int reps) {
    T *value = device_value<T>(in);
    const int per_warp = rows_per_warp(kChannels / (16 / sizeof(T)), in.per_query);
    const long warps = (in.queries + per_warp - 1) / per_warp;
    const Timing t = run<T>(in, out, reps, [&] {
        gather_cuda_cores<T><<<(warps * 32 + 255) / 256, 256>>>(value, rows, weights, in.queries,
                                                               in.per_query, per_warp, out);
    });
    check(cudaFree(value));
    return t;
}

template <typename T>
Timing tensor_cores(const Inputs &in, const int *rows, float *out, int reps) {
    T *value = device_value<T>(in);
    std::vector<uint4> halves(in.weights.size() / 4);
    for (size_t p = 0; p < halves.size(); ++p) {
        const float w[4] = {in.weights[4 * p], in.weights[4 * p + 1], in.weights[4 * p + 2],
                            in.weights[4 * p + 3]};
        halves[p] = split_halves<T>(w);
    }
    uint4 *d_halves = nullptr;
    check(cudaMalloc(&d_halves, halves.size() * sizeof(uint4)));
    check(cudaMemcpy(d_halves, halves.data(), halves.size() * sizeof(uint4),
                     cudaMemcpyHostToDevice));
    const long warps = (in.queries + 3) / 4;
    const Timing t = run<T>(in, out, reps, [&] {
        gather_tensor_cores<T><<<(warps * 32 + 255) / 256, 256>>>(value, rows, d_halves,
                                                                 in.queries, in.per_query, out);
    });
    check(cudaFree(d_halves));
    check(cudaFree(value));
    return t;
}

void measure(const Shape &s, bool local, bool head_major, int reps) {
    const Inputs in = inputs_for(s, local, head_major);
    int *rows = nullptr;
    float *weights = nullptr, *out = nullptr;
    check(cudaMalloc(&rows, in.corners.size() * sizeof(int)));
    check(cudaMalloc(&weights, in.weights.size() * sizeof(float)));
    check(cudaMalloc(&out, in.queries * kChannels * sizeof(float)));
    check(cudaMemcpy(rows, in.corners.data(), in.corners.size() * sizeof(int),
                     cudaMemcpyHostToDevice));
    check(cudaMemcpy(weights, in.weights.data(), in.weights.size() * sizeof(float),
                     cudaMemcpyHostToDevice));
    const auto *rows4 = reinterpret_cast<const int4 *>(rows);
    const auto *weights4 = reinterpret_cast<const float4 *>(weights);
    const Timing f32 = cuda_cores<float>(in, rows4, weights4, out, reps);
    const Timing cores[2] = {cuda_cores<__half>(in, rows4, weights4, out, reps),
                             cuda_cores<__nv_bfloat16>(in, rows4, weights4, out, reps)};
    const Timing tensor[2] = {tensor_cores<__half>(in, rows, out, reps),
                              tensor_cores<__nv_bfloat16>(in, rows, out, reps)};
    const char *names[2] = {"float16", "bfloat16"};
    for (int d = 0; d < 2; ++d)
        std::printf("| %s | %s | %s | %s | %.4f (%.1e) | %.4f (%.1e) | %.4f (%.1e) | %.2fx | "
                    "%.2fx |\n",
                    s.name, local ? "local" : "uniform", head_major ? "N,M,S,D" : "N,S,M,D",
                    names[d], f32.ms, f32.error,
                    cores[d].ms, cores[d].error, tensor[d].ms, tensor[d].error,
                    f32.ms / cores[d].ms, f32.ms / tensor[d].ms);
    check(cudaFree(rows));
    check(cudaFree(weights));
    check(cudaFree(out));
}

}  // namespace

int main(int argc, char **argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
    std::printf("| shape | locations | value layout | 16-bit type "
                "| float32, CUDA cores, ms (error) | 16-bit, CUDA cores | 16-bit, tensor cores "
                "| float32 / CUDA cores | float32 / tensor cores |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
    for (const bool head_major : {false, true})
        for (const bool local : {false, true})
            for (const Shape &s : issue6_shapes())
                measure(s, local, head_major, reps);
    return 0;
}
