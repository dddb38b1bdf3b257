// csrc/kernels/linear_sum_assignment/linear_sum_assignment.cu: the solver, one block a problem.
//
// The CPU solver's algorithm (linear_sum_assignment.cpp) with each step's scan over the
// remaining columns spread over the block and its choice made by a reduction that picks the
// column scipy's sequential scan picks. Everything else (the order of the remaining columns, the
// float64 operations, the dual updates, the augmentation) is the sequential code's, so the
// results are the same bits. State lives in the caller's global workspace (problems of
// thousands of columns); a block's threads see each other's writes after __syncthreads.
#include <cmath>
#include <cstdint>
#include <limits>

#include "linear_sum_assignment/linear_sum_assignment_cuda.h"

namespace turbo_physai::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kAlign = 256;

/// One problem's state (nr <= nc), carved from its workspace: row/column duals, the tentative
/// path costs and predecessors, the assignment, the remaining columns in scan order and the
/// columns visited by the current row's search in visiting order.
struct State {
    double *u, *v, *shortest;
    int *path, *row4col, *col4row, *remaining, *visited;
};

/// Bytes of the state at `base` (nullptr: only the size), a multiple of kAlign.
__host__ __device__ std::int64_t carve(char *base, std::int64_t nr, std::int64_t nc,
                                       State *s) {
    const std::int64_t doubles = nr + 2 * nc, ints = nr + 4 * nc;
    if (s) {
        s->u = reinterpret_cast<double *>(base);
        s->v = s->u + nr;
        s->shortest = s->v + nc;
        s->path = reinterpret_cast<int *>(s->shortest + nc);
        s->row4col = s->path + nc;
        s->col4row = s->row4col + nc;
        s->remaining = s->col4row + nr;
        s->visited = s->remaining + nc;
    }
    const std::int64_t bytes = doubles * 8 + ints * 4;
    return (bytes + kAlign - 1) / kAlign * kAlign;
}

/// The problem as solved: a tall matrix transposed by swapping its strides.
template <class T>
struct Matrix {
    const T *p;
    std::int64_t row_stride, col_stride;
    __device__ double operator()(int i, int j) const {
        return static_cast<double>(p[i * row_stride + j * col_stride]);
    }
};

/// A column of the scan: its tentative cost and `rank << 32 | column`.
struct Candidate {
    double cost;
    std::uint64_t tag;
};

// scipy's scan takes a strictly lower cost, or an equal cost at a free column. Among the columns
// at the minimum it therefore ends on the last free one if there is one, and otherwise on the
// first (it reaches the minimum there and no later tie replaces it). Ranking free columns by
// descending position, then taken columns by ascending position after all free ones, makes that
// winner the least (cost, rank): a total order (ranks are distinct) that any reduction order
// computes. An infinite minimum ends the solve (infeasible), whichever column it names.
__device__ __forceinline__ std::uint32_t rank_of(int position, bool free, int nc) {
    return free ? static_cast<std::uint32_t>(nc - 1 - position)
                : static_cast<std::uint32_t>(nc) + static_cast<std::uint32_t>(position);
}

__device__ __forceinline__ int position_of(std::uint32_t rank, int nc) {
    const auto n = static_cast<std::uint32_t>(nc);
    return static_cast<int>(rank < n ? n - 1 - rank : rank - n);
}

__device__ __forceinline__ bool before(const Candidate &a, const Candidate &b) {
    return a.cost < b.cost || (a.cost == b.cost && a.tag < b.tag);
}

/// The block's least candidate, in every thread. Ends with the block (or warp) synchronized, so
/// `partial` may be written again after the caller's next __syncthreads.
template <int kThreads>
__device__ Candidate block_min(Candidate c, Candidate *partial) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const Candidate other{__shfl_xor_sync(0xffffffffu, c.cost, offset),
                              __shfl_xor_sync(0xffffffffu, c.tag, offset)};
        if (before(other, c))
            c = other;
    }
    if constexpr (kThreads == 32) {
        __syncwarp();
    } else {
        if (threadIdx.x % 32 == 0)
            partial[threadIdx.x / 32] = c;
        __syncthreads();
        c = partial[0];
        for (int w = 1; w < kThreads / 32; ++w)
            if (before(partial[w], c))
                c = partial[w];
    }
    return c;
}

/// Writes pairs (j, row4col[j]) for the assigned columns j in increasing order: scipy's argsort
/// of col4row for a transposed problem, as a block-wide stream compaction.
template <int kThreads>
__device__ void write_by_column(const State &s, int nc, std::int64_t *row_ind,
                                std::int64_t *col_ind, int *counts) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int base = 0;
    for (int start = 0; start < nc; start += kThreads) {
        const int j = start + static_cast<int>(threadIdx.x);
        const int row = j < nc ? s.row4col[j] : -1;
        const unsigned ballot = __ballot_sync(0xffffffffu, row != -1);
        if (lane == 0)
            counts[warp] = __popc(ballot);
        __syncthreads();
        int at = base + __popc(ballot & ((1u << lane) - 1u)), total = 0;
        for (int w = 0; w < kThreads / 32; ++w) {
            at += w < warp ? counts[w] : 0;
            total += counts[w];
        }
        if (row != -1) {
            row_ind[at] = j;
            col_ind[at] = row;
        }
        base += total;
        __syncthreads();
    }
}

template <class T, int kThreads>
__global__ void __launch_bounds__(kThreads)
    lsap_kernel(LsapCudaArgs<T> a, std::int64_t workspace_bytes) {
    __shared__ Candidate partial[kThreads / 32];
    __shared__ int counts[kThreads / 32];
    const int tid = static_cast<int>(threadIdx.x);
    const std::int64_t b = blockIdx.x;
    const bool transposed = a.cols < a.rows;
    const int nr = static_cast<int>(transposed ? a.cols : a.rows);
    const int nc = static_cast<int>(transposed ? a.rows : a.cols);
    const Matrix<T> cost{a.cost + b * a.batch_stride, transposed ? a.col_stride : a.row_stride,
                         transposed ? a.row_stride : a.col_stride};
    std::int64_t *row_ind = a.row_ind + b * nr, *col_ind = a.col_ind + b * nr;
    const auto finish = [&](LsapStatus status) {
        if (status != kLsapOk) {
            for (int i = tid; i < nr; i += kThreads)
                row_ind[i] = col_ind[i] = -1;
        }
        if (tid == 0)
            a.status[b] = status;
    };
    if (nr == 0)
        return finish(kLsapOk);
    State s;
    carve(static_cast<char *>(a.workspace) + b * workspace_bytes, nr, nc, &s);

    bool invalid = false;
    for (int i = 0; i < nr; ++i) {
        for (int j = tid; j < nc; j += kThreads) {
            const double c = cost(i, j);
            invalid |= isnan(c) || c == -kInf;
        }
    }
    if (__syncthreads_or(invalid))
        return finish(kLsapInvalid);
    for (int j = tid; j < nc; j += kThreads) {
        s.v[j] = 0.0;
        s.row4col[j] = -1;
    }
    for (int i = tid; i < nr; i += kThreads) {
        s.u[i] = 0.0;
        s.col4row[i] = -1;
    }

    for (int cur = 0; cur < nr; ++cur) {
        __syncthreads();  // the previous row's augmentation (or the initialization) is visible
        for (int k = tid; k < nc; k += kThreads) {
            s.shortest[k] = kInf;
            s.remaining[k] = nc - 1 - k;  // scipy's scan order: reversed, see the CPU solver
        }
        __syncthreads();
        double min_val = 0.0;
        int num = nc, visits = 0, sink = -1;
        for (int i = cur; sink < 0;) {
            const double ui = s.u[i];
            Candidate best{kInf, ~std::uint64_t{0}};
            for (int k = tid; k < num; k += kThreads) {
                const int j = s.remaining[k];
                // scipy's order of operations; sums only, so nothing for nvcc to contract
                const double r = min_val + cost(i, j) - ui - s.v[j];
                double shortest = s.shortest[j];
                if (r < shortest) {
                    s.path[j] = i;
                    s.shortest[j] = shortest = r;
                }
                const Candidate c{shortest, std::uint64_t{rank_of(k, s.row4col[j] == -1, nc)}
                                                    << 32 |
                                                static_cast<std::uint32_t>(j)};
                if (before(c, best))
                    best = c;
            }
            best = block_min<kThreads>(best, partial);
            min_val = best.cost;
            if (min_val == kInf)
                return finish(kLsapInfeasible);  // the same in every thread
            const int j = static_cast<int>(best.tag & 0xffffffffu);
            if (tid == 0) {  // every thread has finished reading `remaining` (block_min)
                s.remaining[position_of(static_cast<std::uint32_t>(best.tag >> 32), nc)] =
                    s.remaining[num - 1];
                s.visited[visits] = j;
            }
            --num;
            ++visits;
            const int next = s.row4col[j];
            __syncthreads();
            if (next == -1)
                sink = j;
            else
                i = next;
        }

        // Dual updates: the visited rows besides `cur` are those of the visited taken columns.
        if (tid == 0)
            s.u[cur] += min_val;
        for (int k = tid; k < visits; k += kThreads) {
            const int j = s.visited[k];
            const double step = min_val - s.shortest[j];
            s.v[j] -= step;
            if (j != sink)
                s.u[s.row4col[j]] += step;
        }
        __syncthreads();
        if (tid == 0) {
            for (int j = sink;;) {
                const int i = s.path[j];
                s.row4col[j] = i;
                const int previous = s.col4row[i];
                s.col4row[i] = j;
                if (i == cur)
                    break;
                j = previous;
            }
        }
    }
    __syncthreads();
    if (transposed) {
        write_by_column<kThreads>(s, nc, row_ind, col_ind, counts);
    } else {
        for (int i = tid; i < nr; i += kThreads) {
            row_ind[i] = i;
            col_ind[i] = s.col4row[i];
        }
    }
    finish(kLsapOk);
}

// One to three columns a thread: a step's time is the latency of its scan and reduction, and a
// wider block shortens the scan. Measured on an H200 (kernel time per problem, threads 32 / 64
// / 128 / 256 / 512): 300 columns (300x100 transposed) 0.41 / 0.28 / 0.22 / 0.22 / 0.27 ms; 900
// columns (900x100) 1.29 / 0.64 / 0.51 / 0.38 / 0.32 ms.
int threads_for(std::int64_t nc) {
    return nc <= 64 ? 32 : nc <= 128 ? 64 : nc <= 256 ? 128 : nc <= 768 ? 256 : 512;
}

template <class T>
cudaError_t launch(const LsapCudaArgs<T> &a, cudaStream_t stream) {
    constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
    if (a.rows < 0 || a.cols < 0 || a.rows > kMax || a.cols > kMax || a.batch < 0 ||
        a.batch > kMax)
        return cudaErrorInvalidValue;
    if (a.batch == 0)
        return cudaSuccess;
    const std::int64_t bytes = linear_sum_assignment_cuda_workspace_bytes(a.rows, a.cols);
    const auto blocks = static_cast<unsigned>(a.batch);
    switch (a.threads ? a.threads : threads_for(a.rows < a.cols ? a.cols : a.rows)) {
    case 32: lsap_kernel<T, 32><<<blocks, 32, 0, stream>>>(a, bytes); break;
    case 64: lsap_kernel<T, 64><<<blocks, 64, 0, stream>>>(a, bytes); break;
    case 128: lsap_kernel<T, 128><<<blocks, 128, 0, stream>>>(a, bytes); break;
    case 256: lsap_kernel<T, 256><<<blocks, 256, 0, stream>>>(a, bytes); break;
    case 512: lsap_kernel<T, 512><<<blocks, 512, 0, stream>>>(a, bytes); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

}  // namespace

std::int64_t linear_sum_assignment_cuda_workspace_bytes(std::int64_t rows, std::int64_t cols) {
    return carve(nullptr, rows < cols ? rows : cols, rows < cols ? cols : rows, nullptr);
}

cudaError_t linear_sum_assignment_cuda(const LsapCudaArgs<float> &args, cudaStream_t stream) {
    return launch(args, stream);
}

cudaError_t linear_sum_assignment_cuda(const LsapCudaArgs<double> &args, cudaStream_t stream) {
    return launch(args, stream);
}

}  // namespace turbo_physai::kernels
