// csrc/kernels/linear_sum_assignment/linear_sum_assignment.cpp: the CPU solver, one thread.
#include "linear_sum_assignment/linear_sum_assignment.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace turbo_physai::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// An nr x nc problem with nr <= nc (a tall matrix is solved transposed, as scipy does): u and v
/// are the row and column duals, row4col/col4row the partial assignment (-1: free).
class Solver {
public:
    Solver(std::int64_t nr, std::int64_t nc)
        : nr_(nr), nc_(nc), cost_(nr * nc), u_(nr, 0.0), v_(nc, 0.0), shortest_(nc),
          path_(nc, -1), row4col_(nc, -1), col4row_(nr, -1), remaining_(nc) {
        visited_.reserve(nc);
    }

    double *cost() { return cost_.data(); }

    /// Assigns rows 0..nr-1 in order; false when a row finds no finite path (infeasible).
    bool solve() {
        for (std::int64_t cur = 0; cur < nr_; ++cur) {
            double min_val = 0.0;
            const std::int64_t sink = shortest_path(cur, min_val);
            if (sink < 0)
                return false;
            update_duals(cur, sink, min_val);
            augment(cur, sink);
        }
        return true;
    }

    /// The assignment sorted by row of the original matrix: by row when not transposed, else by
    /// column of this one (scipy's argsort of col4row; the columns of the pairs are distinct).
    void write(bool transposed, std::int64_t *row_ind, std::int64_t *col_ind) const {
        if (!transposed) {
            for (std::int64_t i = 0; i < nr_; ++i) {
                row_ind[i] = i;
                col_ind[i] = col4row_[i];
            }
            return;
        }
        std::int64_t k = 0;
        for (std::int64_t j = 0; j < nc_; ++j) {
            if (row4col_[j] != -1) {
                row_ind[k] = j;
                col_ind[k++] = row4col_[j];
            }
        }
    }

private:
    /// Dijkstra from free row `cur` over the reduced costs; returns the free column that ends the
    /// path (-1: none at finite cost) and its cost in `min_val`. Visited columns go to visited_
    /// in order; the rows visited besides `cur` are those columns' rows.
    std::int64_t shortest_path(std::int64_t cur, double &min_val) {
        // Reverse order, then shrunk by moving the last entry into the removed slot: the order
        // scipy scans in, which decides its ties (reversed so that a constant matrix gives the
        // identity, scipy issue 11602).
        std::int64_t num = nc_;
        for (std::int64_t k = 0; k < nc_; ++k)
            remaining_[k] = nc_ - 1 - k;
        std::fill(shortest_.begin(), shortest_.end(), kInf);
        visited_.clear();
        for (std::int64_t i = cur;;) {
            const double *row = &cost_[i * nc_];
            const double ui = u_[i];
            std::int64_t index = -1;
            double lowest = kInf;
            for (std::int64_t k = 0; k < num; ++k) {
                const std::int64_t j = remaining_[k];
                const double r = min_val + row[j] - ui - v_[j];  // scipy's order of operations
                if (r < shortest_[j]) {
                    path_[j] = i;
                    shortest_[j] = r;
                }
                // A tie goes to a free column (it ends the path); among those, the last one.
                if (shortest_[j] < lowest || (shortest_[j] == lowest && row4col_[j] == -1)) {
                    lowest = shortest_[j];
                    index = k;
                }
            }
            min_val = lowest;
            if (min_val == kInf)
                return -1;
            const std::int64_t j = remaining_[index];
            visited_.push_back(j);
            remaining_[index] = remaining_[--num];
            if (row4col_[j] == -1)
                return j;
            i = row4col_[j];
        }
    }

    void update_duals(std::int64_t cur, std::int64_t sink, double min_val) {
        u_[cur] += min_val;
        for (const std::int64_t j : visited_) {
            const double step = min_val - shortest_[j];
            v_[j] -= step;
            if (j != sink)
                u_[row4col_[j]] += step;  // the visited row reached through column j
        }
    }

    void augment(std::int64_t cur, std::int64_t sink) {
        for (std::int64_t j = sink;;) {
            const std::int64_t i = path_[j];
            row4col_[j] = i;
            std::swap(col4row_[i], j);
            if (i == cur)
                return;
        }
    }

    std::int64_t nr_, nc_;
    std::vector<double> cost_, u_, v_, shortest_;
    std::vector<std::int64_t> path_, row4col_, col4row_, remaining_, visited_;
};

template <class T>
LsapStatus solve(const T *cost, std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                 std::int64_t col_stride, std::int64_t *row_ind, std::int64_t *col_ind) {
    const bool transposed = cols < rows;
    if (transposed) {
        std::swap(rows, cols);
        std::swap(row_stride, col_stride);
    }
    if (rows == 0)
        return kLsapOk;
    const auto fail = [&](LsapStatus status) {
        std::fill_n(row_ind, rows, -1);
        std::fill_n(col_ind, rows, -1);
        return status;
    };
    Solver solver(rows, cols);
    double *dense = solver.cost();
    for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
            const double c = static_cast<double>(cost[i * row_stride + j * col_stride]);
            if (std::isnan(c) || c == -kInf)
                return fail(kLsapInvalid);
            dense[i * cols + j] = c;
        }
    }
    if (!solver.solve())
        return fail(kLsapInfeasible);
    solver.write(transposed, row_ind, col_ind);
    return kLsapOk;
}

}  // namespace

LsapStatus linear_sum_assignment_cpu(const float *cost, std::int64_t rows, std::int64_t cols,
                                     std::int64_t row_stride, std::int64_t col_stride,
                                     std::int64_t *row_ind, std::int64_t *col_ind) {
    return solve(cost, rows, cols, row_stride, col_stride, row_ind, col_ind);
}

LsapStatus linear_sum_assignment_cpu(const double *cost, std::int64_t rows, std::int64_t cols,
                                     std::int64_t row_stride, std::int64_t col_stride,
                                     std::int64_t *row_ind, std::int64_t *col_ind) {
    return solve(cost, rows, cols, row_stride, col_stride, row_ind, col_ind);
}

}  // namespace turbo_physai::kernels
