// tests/cpp/test_linear_sum_assignment.cpp: the CPU assignment solver on hand-checked cases
// (expected pairs from scipy 1.17; equality with scipy on random inputs: tests/ops).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "linear_sum_assignment/linear_sum_assignment.h"

namespace tk = turbo_physai::kernels;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Matrix = std::vector<std::vector<double>>;
using Pairs = std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>;

struct Solved {
    tk::LsapStatus status;
    Pairs pairs;
};

/// Solves `m` (row-major, contiguous) in float64.
Solved solve(const Matrix &m) {
    const auto rows = static_cast<std::int64_t>(m.size());
    const auto cols = rows ? static_cast<std::int64_t>(m[0].size()) : 0;
    std::vector<double> flat;
    for (const auto &row : m)
        flat.insert(flat.end(), row.begin(), row.end());
    const auto n = static_cast<std::size_t>(std::min(rows, cols));
    Pairs p{std::vector<std::int64_t>(n, 7), std::vector<std::int64_t>(n, 7)};
    const tk::LsapStatus status = tk::linear_sum_assignment_cpu(
        flat.data(), rows, cols, cols, 1, p.first.data(), p.second.data());
    return {status, p};
}

Pairs pairs(std::vector<std::int64_t> rows, std::vector<std::int64_t> cols) {
    return {std::move(rows), std::move(cols)};
}

void expect_solution(const Matrix &m, const Pairs &want) {
    const Solved got = solve(m);
    EXPECT_EQ(got.status, tk::kLsapOk);
    EXPECT_EQ(got.pairs, want);
}

}  // namespace

TEST(LinearSumAssignment, Square) {
    expect_solution({{4, 1, 3}, {2, 0, 5}, {3, 2, 2}}, pairs({0, 1, 2}, {1, 0, 2}));
}

TEST(LinearSumAssignment, ConstantMatrixGivesTheIdentity) {
    // The remaining columns start in reverse order, and a tie goes to the last free column.
    expect_solution(Matrix(3, std::vector<double>(3, 0.0)), pairs({0, 1, 2}, {0, 1, 2}));
    expect_solution(Matrix(2, std::vector<double>(4, 0.0)), pairs({0, 1}, {0, 1}));
    expect_solution(Matrix(4, std::vector<double>(2, 0.0)), pairs({0, 1}, {0, 1}));
}

TEST(LinearSumAssignment, TiesFollowScipysScan) {
    // Columns 3 then 2 reach cost 1; the later free one wins.
    expect_solution({{5, 9, 1, 1}}, pairs({0}, {2}));
    expect_solution({{5}, {9}, {1}, {1}}, pairs({2}, {0}));
    expect_solution({{1, 1, 2}, {1, 1, 2}, {2, 1, 1}}, pairs({0, 1, 2}, {0, 1, 2}));
    expect_solution({{2, 0, 0, 0, 0, 2}, {2, 1, 0, 0, 0, 1}, {1, 1, 0, 0, 2, 2},
                     {0, 0, 1, 1, 2, 1}},
                    pairs({0, 1, 2, 3}, {1, 2, 3, 0}));
    expect_solution({{1, 1, 1, 1}, {0, 2, 2, 2}, {2, 0, 0, 1}, {1, 2, 2, 0}, {2, 0, 0, 2},
                     {2, 0, 0, 0}},
                    pairs({1, 2, 3, 4}, {0, 1, 3, 2}));
}

TEST(LinearSumAssignment, RectangularBothWays) {
    expect_solution({{1, 2, 3}, {3, 2, 1}}, pairs({0, 1}, {0, 2}));
    // Tall: solved transposed, returned sorted by row.
    expect_solution({{1, 3}, {2, 2}, {3, 1}}, pairs({0, 2}, {0, 1}));
    expect_solution({{0, 0, 1}, {0, 1, 0}, {1, 0, 0}, {0, 0, 0}}, pairs({0, 1, 2}, {0, 2, 1}));
}

TEST(LinearSumAssignment, InfiniteEntriesThatStayFeasible) {
    expect_solution({{kInf, 1}, {1, kInf}}, pairs({0, 1}, {1, 0}));
}

TEST(LinearSumAssignment, EmptyWritesNothing) {
    double unused = 0;
    std::int64_t rows = 7, cols = 7;
    for (auto [r, c] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {3, 0}, {0, 0}}) {
        EXPECT_EQ(tk::linear_sum_assignment_cpu(&unused, r, c, c, 1, &rows, &cols), tk::kLsapOk);
        EXPECT_EQ(rows, 7);
        EXPECT_EQ(cols, 7);
    }
}

TEST(LinearSumAssignment, InvalidEntries) {
    for (const Matrix &m : {Matrix{{kNaN, 1}}, Matrix{{1, 2}, {-kInf, 1}}, Matrix{{1}, {kNaN}}}) {
        const Solved got = solve(m);
        EXPECT_EQ(got.status, tk::kLsapInvalid);
        EXPECT_EQ(got.pairs.first, std::vector<std::int64_t>(got.pairs.first.size(), -1));
        EXPECT_EQ(got.pairs.second, std::vector<std::int64_t>(got.pairs.second.size(), -1));
    }
}

TEST(LinearSumAssignment, Infeasible) {
    for (const Matrix &m : {Matrix{{1, kInf}, {kInf, kInf}}, Matrix{{kInf, kInf, kInf}},
                            Matrix{{1, kInf}, {2, kInf}, {3, kInf}}}) {
        const Solved got = solve(m);
        EXPECT_EQ(got.status, tk::kLsapInfeasible);
        EXPECT_EQ(got.pairs.first, std::vector<std::int64_t>(got.pairs.first.size(), -1));
    }
}

TEST(LinearSumAssignment, StridesAndFloat32) {
    // The tall 3x2 case above, stored transposed (column-major) as float32.
    const std::vector<float> col_major{1, 2, 3, 3, 2, 1};
    std::vector<std::int64_t> rows(2), cols(2);
    EXPECT_EQ(tk::linear_sum_assignment_cpu(col_major.data(), 3, 2, 1, 3, rows.data(),
                                            cols.data()),
              tk::kLsapOk);
    EXPECT_EQ(std::make_pair(rows, cols), pairs({0, 2}, {0, 1}));
    // Every other element of a 2x6 buffer: the 2x3 {{1, 2, 3}, {3, 2, 1}}.
    const std::vector<double> spaced{1, -5, 2, -5, 3, -5, 3, -5, 2, -5, 1, -5};
    EXPECT_EQ(tk::linear_sum_assignment_cpu(spaced.data(), 2, 3, 6, 2, rows.data(),
                                            cols.data()),
              tk::kLsapOk);
    EXPECT_EQ(std::make_pair(rows, cols), pairs({0, 1}, {0, 2}));
}
