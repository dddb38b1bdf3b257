// tests/cpp/test_ms_deform_attn_cuda_problem.cpp: the host-side rules of a CUDA MSDA problem
// (dtype pairs, indexing limits, the sorted scheme); no GPU needed. Built with the CUDA kernels.
#ifdef TPA_WITH_CUDA
#include <gtest/gtest.h>

#include <cstdint>

#include "ms_deform_attn/ms_deform_attn_cuda.h"

namespace cu = turbo_physai::kernels::msda::cuda;

namespace {

cu::Problem sized(std::int64_t queries, cu::Dtype dtype) {
    // N = 1, S = 100 rows, M = 2 heads, D = 32, L = 1 level, P = 4 points.
    return cu::Problem{1, 100, 2, 32, queries, 1, 4, nullptr, nullptr, dtype};
}

TEST(MsDeformAttnCudaProblem, PointsTakeValuesDtypeUnlessNamed) {
    for (const cu::Dtype dtype : {cu::Dtype::float32, cu::Dtype::float16, cu::Dtype::bfloat16}) {
        const cu::Problem p = sized(5, dtype);
        EXPECT_EQ(cu::point_dtype_of(p), dtype);  // not a silent mixed pair
        EXPECT_TRUE(cu::supported_dtypes(p));
    }
    cu::Problem mixed = sized(5, cu::Dtype::bfloat16);
    mixed.point_dtype = cu::Dtype::float32;
    EXPECT_EQ(cu::point_dtype_of(mixed), cu::Dtype::float32);
    EXPECT_TRUE(cu::supported_dtypes(mixed));
}

TEST(MsDeformAttnCudaProblem, OnlyFloat32PointsMixWithA16BitValue) {
    cu::Problem p = sized(5, cu::Dtype::bfloat16);
    p.point_dtype = cu::Dtype::float16;
    EXPECT_FALSE(cu::supported_dtypes(p));
    p = sized(5, cu::Dtype::float32);
    p.point_dtype = cu::Dtype::float16;  // narrower locations than value: refused
    EXPECT_FALSE(cu::supported_dtypes(p));
}

TEST(MsDeformAttnCudaProblem, RowsAndRowStridesMustFit32Bits) {
    cu::Problem p = sized(5, cu::Dtype::float32);
    p.value_len = INT32_MAX;
    EXPECT_TRUE(cu::fits_int_indexing(p));
    p.value_len = std::int64_t{INT32_MAX} + 1;
    EXPECT_FALSE(cu::fits_int_indexing(p));
    p = sized(5, cu::Dtype::float32);
    p.heads = 1;
    p.channels = std::int64_t{1} << 29;
    EXPECT_TRUE(cu::fits_int_indexing(p));
    p.channels += 1;
    EXPECT_FALSE(cu::fits_int_indexing(p));
}

TEST(MsDeformAttnCudaProblem, AutomaticSchemeFollowsDensity) {
    // 2 * 4 points per query against 200 grad_value rows: corners below 25 queries.
    EXPECT_EQ(cu::sorted_scheme(sized(24, cu::Dtype::float32), cu::SortedScheme::automatic),
              cu::SortedScheme::corners);
    EXPECT_EQ(cu::sorted_scheme(sized(25, cu::Dtype::float32), cu::SortedScheme::automatic),
              cu::SortedScheme::anchors);
    EXPECT_EQ(cu::sorted_scheme(sized(1000, cu::Dtype::float32), cu::SortedScheme::corners),
              cu::SortedScheme::corners);
}

}  // namespace
#endif
