// benchmarks/experiments/msda_classic.cu: our CUDA ms_deform_attn kernels against the classic formulation
// (Deformable DETR's kernel as copied into mmcv), both timed in one process on the same inputs,
// so issue 6's "x times the classic kernel" is a ratio measured in one run rather than against
// the issue's figures. Standalone (no torch); our kernels are linked from csrc/kernels:
//
//   nvcc -std=c++17 -arch=sm_90a -O3 -I csrc/kernels benchmarks/experiments/msda_classic.cu \
//     csrc/kernels/ms_deform_attn/{forward,backward,slice_sums,sorted_sums}.cu -o /tmp/classic
//   /tmp/classic [reps]
//
// The classic formulation, written here from its description: the forward runs a thread per
// output element (n, q, m, c) in blocks of 1024, each bilinear corner a scalar load with its own
// bounds test; the backward runs a block of D threads per (n, q, m) (D = 32 here), adds each
// corner's value gradient with a scalar float atomic per channel, and per sampling point sums the
// D channels' location and weight gradients in shared memory, one thread adding them serially
// between two barriers. Its arithmetic is spelled as the classic source spells it (head and
// channel counts as runtime values, row and column offsets per corner, the location gradient
// summed corner by corner), because this formulation's time moves with that spelling (see
// BENCHMARKS.md). As the classic op does, it zero-fills its output and all three gradients (only
// grad_value needs it). Float32, GPU time from CUDA events (medians), each formulation's memsets
// included, the classic's also timed alone. Both outputs and all gradients are compared with each
// other and the forward with a float64 sum on a sample of queries.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ms_deform_attn/ms_deform_attn_cuda.h"
#include "msda_bench.cuh"

namespace {

using namespace msda_bench;
namespace tpa = turbo_physai::kernels::msda::cuda;

/// Sizes as kernel arguments: the classic kernel serves any head count and channel count, so its
/// index arithmetic divides by runtime values (kHeads and kChannels would make it shifts).
struct Sizes {
    int batch, value_len, queries, levels, points, heads, channels;
    const std::int64_t *shapes, *starts;  // device
};

/// The four bilinear corners of channel c of head m at pixel coordinates (h, w) of a level W
/// wide and H high (top-left, top-right, bottom-left, bottom-right): each corner's element index
/// in the level's rows and whether it lies inside the map (corners outside count as zero).
struct Corners {
    int index[4];
    bool inside[4];
    float lh, lw, hh, hw;  // fractional parts and their complements
};

__device__ Corners corners_of(const Sizes &s, int H, int W, float h, float w, int m, int c) {
    const int h0 = static_cast<int>(floorf(h)), w0 = static_cast<int>(floorf(w));
    const int w_stride = s.heads * s.channels, h_stride = W * w_stride;
    const int top = h0 * h_stride, bottom = top + h_stride, left = w0 * w_stride,
              right = left + w_stride, at = m * s.channels + c;
    const bool in_top = h0 >= 0, in_left = w0 >= 0, in_bottom = h0 + 1 <= H - 1,
               in_right = w0 + 1 <= W - 1;
    const float lh = h - h0, lw = w - w0;
    return {{top + left + at, top + right + at, bottom + left + at, bottom + right + at},
            {in_top && in_left, in_top && in_right, in_bottom && in_left, in_bottom && in_right},
            lh, lw, 1 - lh, 1 - lw};
}

/// Pixel coordinate of a normalized location on a level `size` pixels long. The classic source
/// writes `loc * size - 0.5`, a double literal; nvcc folds that into the float FMA this compiles
/// to (the PTX of both spellings is identical), so the float64 detour costs nothing.
__device__ float pixel(float loc, int size) { return loc * size - 0.5f; }

__global__ void classic_forward(Sizes s, const float *value, const float *loc, const float *attn,
                                float *out) {
    // 32-bit indices, as the classic kernel has (every index of issue 6's shapes fits).
    const int total = s.batch * s.queries * s.heads * s.channels;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int c = i % s.channels, nqm = i / s.channels, m = nqm % s.heads;
        const int n = nqm / s.heads / s.queries;
        const int point0 = nqm * s.levels * s.points;
        float acc = 0;
        for (int l = 0; l < s.levels; ++l) {
            const int H = static_cast<int>(s.shapes[2 * l]);
            const int W = static_cast<int>(s.shapes[2 * l + 1]);
            const float *level =
                value + (n * s.value_len + static_cast<int>(s.starts[l])) * s.heads * s.channels;
            for (int p = 0; p < s.points; ++p) {
                const int k = point0 + l * s.points + p;
                const float h = pixel(loc[2 * k + 1], H), w = pixel(loc[2 * k], W);
                if (!(h > -1 && w > -1 && h < H && w < W))
                    continue;
                const Corners k4 = corners_of(s, H, W, h, w, m, c);
                float v[4];
                for (int j = 0; j < 4; ++j)
                    v[j] = k4.inside[j] ? level[k4.index[j]] : 0.f;
                acc += attn[k] * (k4.hh * k4.hw * v[0] + k4.hh * k4.lw * v[1] +
                                  k4.lh * k4.hw * v[2] + k4.lh * k4.lw * v[3]);
            }
        }
        out[i] = acc;
    }
}

/// One point's contributions from channel c: value-gradient atomics into its corners, and this
/// channel's parts of the location and weight gradients, accumulated per corner as the classic
/// source does.
__device__ void point_backward(const float *level, float *grad_level, const Corners &corner,
                               int H, int W, float top, float a, float &gw, float &gh,
                               float &ga) {
    const float g = top * a;
    const float lh = corner.lh, lw = corner.lw, hh = corner.hh, hw = corner.hw;
    const float weight[4] = {hh * hw, hh * lw, lh * hw, lh * lw};
    const float dh[4] = {-hw, -lw, hw, lw}, dw[4] = {-hh, hh, -lh, lh};  // d weight / d (h, w)
    float v[4] = {0, 0, 0, 0}, grad_h = 0, grad_w = 0;
    for (int j = 0; j < 4; ++j)
        if (corner.inside[j]) {
            v[j] = level[corner.index[j]];
            grad_h += dh[j] * v[j], grad_w += dw[j] * v[j];
            atomicAdd(grad_level + corner.index[j], weight[j] * g);
        }
    ga = top * (weight[0] * v[0] + weight[1] * v[1] + weight[2] * v[2] + weight[3] * v[3]);
    gw = W * grad_w * g;
    gh = H * grad_h * g;
}

/// A block of kChannels threads per (n, q, m) (the source's block size, a template argument
/// there, is the channel count); grad_value zeroed by the caller.
__global__ void classic_backward(Sizes s, const float *value, const float *loc, const float *attn,
                                 const float *grad_out, float *grad_value, float *grad_loc,
                                 float *grad_attn) {
    __shared__ float cache_loc[2 * kChannels], cache_attn[kChannels];
    const int total = s.batch * s.queries * s.heads * s.channels;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int c = i % s.channels, nqm = i / s.channels, m = nqm % s.heads;
        const int n = nqm / s.heads / s.queries;
        const float top = grad_out[i];
        const int point0 = nqm * s.levels * s.points;
        for (int l = 0; l < s.levels; ++l) {
            const int H = static_cast<int>(s.shapes[2 * l]);
            const int W = static_cast<int>(s.shapes[2 * l + 1]);
            const int offset =
                (n * s.value_len + static_cast<int>(s.starts[l])) * s.heads * s.channels;
            for (int p = 0; p < s.points; ++p) {
                const int k = point0 + l * s.points + p;
                const float h = pixel(loc[2 * k + 1], H), w = pixel(loc[2 * k], W);
                float gw = 0, gh = 0, ga = 0;
                if (h > -1 && w > -1 && h < H && w < W)
                    point_backward(value + offset, grad_value + offset,
                                   corners_of(s, H, W, h, w, m, c), H, W, top, attn[k], gw, gh,
                                   ga);
                cache_loc[2 * c] = gw, cache_loc[2 * c + 1] = gh, cache_attn[c] = ga;
                __syncthreads();
                if (c == 0) {
                    float sw = 0, sh = 0, sa = 0;
                    for (int t = 0; t < kChannels; ++t)
                        sw += cache_loc[2 * t], sh += cache_loc[2 * t + 1], sa += cache_attn[t];
                    grad_loc[2 * k] = sw, grad_loc[2 * k + 1] = sh, grad_attn[k] = sa;
                }
                __syncthreads();
            }
        }
    }
}

struct Buffers {
    float *value, *loc, *attn, *out, *grad_out, *grad_value, *grad_loc, *grad_attn;
};

template <typename T>
T *upload(const std::vector<T> &host) {
    T *d = nullptr;
    check(cudaMalloc(&d, host.size() * sizeof(T)));
    check(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
std::vector<T> download(const T *d, size_t count) {
    std::vector<T> host(count);
    check(cudaMemcpy(host.data(), d, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

/// Largest |a - b| over the largest |b|.
double difference(const std::vector<float> &a, const std::vector<float> &b) {
    double worst = 0, largest = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
        largest = std::max(largest, std::abs(static_cast<double>(b[i])));
    }
    return largest > 0 ? worst / largest : worst;
}

/// The float64 forward of every 101st (n, q, m), against `out`, relative to the largest output.
double reference_error(const Shape &s, const std::vector<float> &value,
                       const std::vector<float> &loc, const std::vector<float> &attn,
                       const std::vector<int> &starts, int len, const std::vector<float> &out) {
    const int L = static_cast<int>(s.levels.size()), P = s.points;
    double worst = 0, largest = 0;
    for (long nqm = 0; nqm < static_cast<long>(s.batch) * s.queries * kHeads; nqm += 101) {
        const int m = nqm % kHeads, n = static_cast<int>(nqm / kHeads / s.queries);
        for (int c = 0; c < kChannels; ++c) {
            double acc = 0;
            for (int l = 0; l < L; ++l) {
                const auto [H, W] = s.levels[l];
                for (int p = 0; p < P; ++p) {
                    const long k = (nqm * L + l) * P + p;
                    const double h = loc[2 * k + 1] * H - 0.5, w = loc[2 * k] * W - 0.5;
                    const int h0 = static_cast<int>(std::floor(h));
                    const int w0 = static_cast<int>(std::floor(w));
                    for (int dy = 0; dy < 2; ++dy)
                        for (int dx = 0; dx < 2; ++dx) {
                            const int y = h0 + dy, x = w0 + dx;
                            if (y < 0 || x < 0 || y >= H || x >= W)
                                continue;
                            const double wy = dy ? h - h0 : 1 - (h - h0);
                            const double wx = dx ? w - w0 : 1 - (w - w0);
                            const long row = static_cast<long>(n) * len + starts[l] + y * W + x;
                            acc += attn[k] * wy * wx * value[(row * kHeads + m) * kChannels + c];
                        }
                }
            }
            worst = std::max(worst, std::abs(out[nqm * kChannels + c] - acc));
            largest = std::max(largest, std::abs(acc));
        }
    }
    return worst / largest;
}

void measure(const Shape &s, bool local, int reps) {
    const int L = static_cast<int>(s.levels.size()), P = s.points;
    const std::vector<int> starts = level_starts(s);
    const int len = starts.back() + s.levels.back().first * s.levels.back().second;
    std::vector<std::int64_t> shapes;
    for (const auto &[h, w] : s.levels)
        shapes.push_back(h), shapes.push_back(w);
    const std::vector<std::int64_t> starts64(starts.begin(), starts.end());
    const long rows = static_cast<long>(s.batch) * len * kHeads;
    const long points = static_cast<long>(s.batch) * s.queries * kHeads * L * P;
    const long outputs = static_cast<long>(s.batch) * s.queries * kHeads * kChannels;
    // Inputs in the manner of msda_cuda.py: value and grad_output N(0, 1), weights a softmax
    // over each (n, q, m)'s points, locations uniform or (local) the query's reference point plus
    // N(0, 2) pixels on each level.
    std::mt19937 gen(0);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::vector<float> value(rows * kChannels), loc(2 * points), attn(points),
        grad_out(outputs);
    for (float &v : value)
        v = normal(gen);
    for (float &v : grad_out)
        v = normal(gen);
    for (long k = 0; k < points; k += L * P) {
        float sum = 0;
        for (int j = 0; j < L * P; ++j)
            sum += attn[k + j] = std::exp(normal(gen));
        for (int j = 0; j < L * P; ++j)
            attn[k + j] /= sum;
    }
    const std::vector<std::pair<float, float>> refs = reference_points(s, len, gen);
    for (long k = 0; k < points; ++k) {
        if (!local) {
            loc[2 * k] = unit(gen), loc[2 * k + 1] = unit(gen);
            continue;
        }
        const auto [rx, ry] = refs[k / (L * P) / kHeads % s.queries];
        const auto [H, W] = s.levels[k / P % L];
        loc[2 * k] = rx + 2.f * normal(gen) / W, loc[2 * k + 1] = ry + 2.f * normal(gen) / H;
    }
    Buffers classic{upload(value), upload(loc), upload(attn), nullptr, upload(grad_out)};
    check(cudaMalloc(&classic.out, outputs * sizeof(float)));
    check(cudaMalloc(&classic.grad_value, rows * kChannels * sizeof(float)));
    check(cudaMalloc(&classic.grad_loc, 2 * points * sizeof(float)));
    check(cudaMalloc(&classic.grad_attn, points * sizeof(float)));
    Buffers ours = classic;  // same inputs, own outputs
    check(cudaMalloc(&ours.out, outputs * sizeof(float)));
    check(cudaMalloc(&ours.grad_value, rows * kChannels * sizeof(float)));
    check(cudaMalloc(&ours.grad_loc, 2 * points * sizeof(float)));
    check(cudaMalloc(&ours.grad_attn, points * sizeof(float)));
    std::int64_t *d_shapes = upload(shapes), *d_starts = upload(starts64);

    const Sizes sz{s.batch, len, s.queries, L, P, kHeads, kChannels, d_shapes, d_starts};
    const tpa::Problem problem{s.batch, len, kHeads, kChannels, s.queries, L, P, d_shapes,
                               d_starts, tpa::Dtype::float32};
    const tpa::BackwardScratch direct{tpa::Accumulation::direct, nullptr, nullptr, nullptr};
    // The classic op zero-fills its output (at::zeros) and all three gradients
    // (at::zeros_like), though only grad_value needs it: those fills are part of its cost.
    const auto zero_output = [&] {
        check(cudaMemsetAsync(classic.out, 0, outputs * sizeof(float)));
    };
    const auto zero_gradients = [&] {
        check(cudaMemsetAsync(classic.grad_value, 0, rows * kChannels * sizeof(float)));
        check(cudaMemsetAsync(classic.grad_loc, 0, 2 * points * sizeof(float)));
        check(cudaMemsetAsync(classic.grad_attn, 0, points * sizeof(float)));
    };
    const auto classic_fwd = [&] {
        zero_output();
        classic_forward<<<static_cast<int>((outputs + 1023) / 1024), 1024>>>(
            sz, classic.value, classic.loc, classic.attn, classic.out);
        check(cudaGetLastError(), "classic forward");
    };
    const auto classic_bwd = [&] {
        zero_gradients();
        classic_backward<<<s.batch * s.queries * kHeads, kChannels>>>(
            sz, classic.value, classic.loc, classic.attn, classic.grad_out, classic.grad_value,
            classic.grad_loc, classic.grad_attn);
        check(cudaGetLastError(), "classic backward");
    };
    const auto ours_fwd = [&] {
        check(tpa::forward(problem, ours.value, ours.loc, ours.attn, ours.out, nullptr),
              "our forward");
    };
    const auto ours_bwd = [&] {
        check(tpa::backward(problem, ours.value, ours.loc, ours.attn, ours.grad_out,
                            ours.grad_value, ours.grad_loc, ours.grad_attn, direct, nullptr),
              "our backward");
    };
    const auto warm_median = [&](auto &&run) {
        run();  // warm-up
        return median_ms(reps, run);
    };
    const float fills[2] = {warm_median(zero_output),
                            warm_median([&] { zero_output(), zero_gradients(); })};
    const float times[4] = {warm_median(classic_fwd),
                            warm_median([&] { classic_fwd(), classic_bwd(); }),
                            warm_median(ours_fwd), warm_median([&] { ours_fwd(), ours_bwd(); })};
    check(cudaDeviceSynchronize());
    const auto out_c = download(classic.out, outputs), out_o = download(ours.out, outputs);
    const double ref_c = reference_error(s, value, loc, attn, starts, len, out_c);
    const double ref_o = reference_error(s, value, loc, attn, starts, len, out_o);
    const double d_out = difference(out_o, out_c);
    const double d_value = difference(download(ours.grad_value, rows * kChannels),
                                      download(classic.grad_value, rows * kChannels));
    const double d_attn =
        difference(download(ours.grad_attn, points), download(classic.grad_attn, points));
    // Location gradients jump where a point lies within float rounding of a pixel edge (the two
    // formulations may take different corners there): count the elements beyond 1e-3 of the
    // largest instead of reporting the worst one.
    const auto gl_o = download(ours.grad_loc, 2 * points);
    const auto gl_c = download(classic.grad_loc, 2 * points);
    long jumps = 0;
    double largest = 0;
    for (float v : gl_c)
        largest = std::max(largest, std::abs(static_cast<double>(v)));
    for (long i = 0; i < 2 * points; ++i)
        jumps += std::abs(static_cast<double>(gl_o[i]) - gl_c[i]) > 1e-3 * largest;
    std::printf("| %s | %s | %.4f | %.4f | %.4f | %.2fx | %.4f | %.4f | %.4f | %.2fx "
                "| %.1e / %.1e | %.1e | %.1e | %.1e | %ld of %ld |\n",
                s.name, local ? "local" : "uniform", times[0], fills[0], times[2],
                times[0] / times[2], times[1], fills[1], times[3], times[1] / times[3], ref_c,
                ref_o, d_out, d_value, d_attn, jumps, 2 * points);
    for (float *p : {classic.value, classic.loc, classic.attn, classic.grad_out, classic.out,
                     classic.grad_value, classic.grad_loc, classic.grad_attn, ours.out,
                     ours.grad_value, ours.grad_loc, ours.grad_attn})
        check(cudaFree(p));
    check(cudaFree(d_shapes));
    check(cudaFree(d_starts));
}

}  // namespace

int main(int argc, char **argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
    std::printf("| shape | locations | classic fwd, ms | its fill | ours fwd | speed-up "
                "| classic fwd+bwd | its fills | ours fwd+bwd | speed-up "
                "| fwd vs float64: classic / ours | out, ours vs classic | grad_value "
                "| grad_attn | grad_loc beyond 1e-3 |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const bool local : {false, true})
        for (const Shape &s : issue6_shapes())
            measure(s, local, reps);
    return 0;
}
