// csrc/kernels/linear_sum_assignment/linear_sum_assignment.h: scipy's assignment solver, CPU.
//
// Reproduces scipy.optimize.linear_sum_assignment (the shortest augmenting path method of
// Crouse 2016, scipy/optimize/rectangular_lsap) step for step: the same float64 operations in
// the same order and the same tie breaks, so the assignment is identical, ties included.
#pragma once

#include <cstdint>

namespace turbo_physai::kernels {

/// What a solve returns, scipy's errors as codes.
enum LsapStatus : std::int32_t {
    kLsapOk = 0,
    kLsapInvalid = 1,     ///< an entry is NaN or -inf: "matrix contains invalid numeric entries"
    kLsapInfeasible = 2,  ///< no assignment of finite cost: "cost matrix is infeasible"
};

/// Minimum-cost assignment of the `rows` x `cols` matrix whose entry (i, j) is
/// `cost[i * row_stride + j * col_stride]` (strides in elements, any sign or 0), computed in
/// float64. Writes min(rows, cols) pairs to `row_ind`/`col_ind`, sorted by row as scipy returns
/// them; -1 in both on a failed status.
LsapStatus linear_sum_assignment_cpu(const float *cost, std::int64_t rows, std::int64_t cols,
                                     std::int64_t row_stride, std::int64_t col_stride,
                                     std::int64_t *row_ind, std::int64_t *col_ind);
LsapStatus linear_sum_assignment_cpu(const double *cost, std::int64_t rows, std::int64_t cols,
                                     std::int64_t row_stride, std::int64_t col_stride,
                                     std::int64_t *row_ind, std::int64_t *col_ind);

}  // namespace turbo_physai::kernels
