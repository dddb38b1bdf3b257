// tests/cpp/test_quant_kernels.cpp: the quantization kernels without torch (bit-exactness to
// LibreYOLO's references is tested from Python: tests/ops/test_quant_*.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "fake_quant_fp4/e2m1.h"
#include "fake_quant_fp4/fake_quant_fp4.h"
#include "fake_quant_fp8/fake_quant_fp8.h"
#include "fake_quant_int8/fake_quant_int8.h"
#include "fake_quant_int8/int8_rounding.h"
#include "fake_quant_int_grouped/fake_quant_int_grouped.h"

namespace tk = turbo_physai::kernels;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_values(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> v(n);
    for (float &x : v)
        x = normal(gen);
    v[1] = kNaN;
    v[2] = kInf;
    v[3] = -0.0f;
    return v;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(FakeQuantFp8, EmptyViewsReturnAtOnce) {
    // A (4, 0) input once divided by its zero column count (SIGFPE).
    const float scale = 1.0f;
    float sentinel = 7.0f;
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{4, 0}, {0, 3}, {0, 0}}) {
        tk::FakeQuantFp8Args a{&sentinel, &scale, &sentinel, rows, cols, cols, cols, 0, true};
        tk::fake_quant_fp8_cpu(a, 2);
    }
    EXPECT_EQ(sentinel, 7.0f);
}

TEST(FakeQuantFp8, StraightThroughIsTheSumNotTheCode) {
    // x + (q - x) rounds twice: 1e10 saturates to q = 448, but 448 - 1e10 rounds to -1e10 (the
    // float32 grid there is 1024 apart), so LibreYOLO's forward gives 0.
    const float x = 1e10f, q = tk::fake_quant_fp8_value(x, 1.0f);
    EXPECT_EQ(q, 448.0f);
    EXPECT_EQ(tk::quant::straight_through(q, x), 0.0f);
    EXPECT_TRUE(std::isnan(tk::quant::straight_through(q, kNaN)));
}

TEST(Int8Rounding, HostConversionOfNonFiniteCodes) {
#if defined(__x86_64__)
    // x86's int64 conversion returns INT64_MIN for NaN and beyond-int64 values: -128 after the
    // clamp, even for +Inf, with the gradient mask off.
    for (float r : {kNaN, kInf, 1e19f}) {
        const tk::int8::Code c = tk::int8::host_int64_code(r);
        EXPECT_EQ(c.value, -128.0f);
        EXPECT_FALSE(c.inside);
    }
#endif
    EXPECT_EQ(tk::int8::host_int64_code(128.0f).value, 127.0f);
    EXPECT_FALSE(tk::int8::host_int64_code(128.0f).inside);
    EXPECT_TRUE(tk::int8::host_int64_code(-128.0f).inside);
    EXPECT_EQ(tk::int8::per_channel_code_cpu(2.5f, 1.0f).value, 2.0f);  // ties to even
}

TEST(Int8Rounding, AffineZeroPointsByDevice) {
    EXPECT_EQ(tk::int8_affine_zero_point(0.5f, 2.0f, false), -128);  // lo widened to 0
    EXPECT_EQ(tk::int8_affine_zero_point(-2.0f, -1.0f, false), 127);  // hi widened to 0
    EXPECT_EQ(tk::int8_affine_zero_point(kNaN, 1.0f, true), 0);  // CUDA saturates NaN to 0
#if defined(__x86_64__)
    EXPECT_EQ(tk::int8_affine_zero_point(kNaN, 1.0f, false), INT32_MIN);
#endif
}

TEST(E2m1, LevelsAndTies) {
    const float next = std::nextafter(0.25f, 1.0f);
    EXPECT_EQ(tk::fp4::e2m1_level(0.25f), 0.0f);  // a tie goes to the smaller level
    EXPECT_EQ(tk::fp4::e2m1_level(next), 0.5f);
    EXPECT_EQ(tk::fp4::e2m1_level(5.0f), 4.0f);
    EXPECT_EQ(tk::fp4::e2m1_level(6.0f), 6.0f);
    EXPECT_EQ(tk::fp4::e2m1_level(kNaN), 0.0f);
    // A negative value rounding to zero comes out +0 through the straight-through sum.
    EXPECT_FALSE(std::signbit(tk::fp4::e2m1_straight_through(-0.1f)));
}

TEST(E2m1, MxBlockScaleFollowsFloatLog2Rounding) {
    // 2^20 (1 - 2^-24) has float32 log2 == 20 (rounded up), so the scale is 2^18, not 2^17.
    EXPECT_EQ(tk::fp4::mx_block_scale(std::ldexp(1.0f - std::ldexp(1.0f, -24), 20)),
              std::ldexp(1.0f, 18));
    EXPECT_EQ(tk::fp4::mx_block_scale(std::ldexp(1.0f - std::ldexp(1.0f, -24), 1)), 0.25f);
    EXPECT_EQ(tk::fp4::mx_block_scale(0.0f), std::ldexp(1.0f, -102));  // amax floored at 1e-30
    EXPECT_EQ(tk::fp4::mx_block_scale(kInf), std::ldexp(1.0f, 127));
    EXPECT_TRUE(std::isnan(tk::fp4::mx_block_scale(kNaN)));
}

TEST(Unpack, CodesLowBitsFirst) {
    const std::uint8_t payload[2] = {0x1F, 0xE4};  // 4-bit codes 15, 1, 4, 14
    const float scale = 0.5f;
    float out[4];
    tk::UnpackIntGroupedArgs a{payload, 2, 2, &scale, 0, 0, out, 1, 4, 4, 4};
    tk::unpack_int_grouped_cpu(a, 1);
    EXPECT_EQ(out[0], 3.5f);   // (15 - 8) * 0.5
    EXPECT_EQ(out[1], -3.5f);  // (1 - 8) * 0.5
    EXPECT_EQ(out[2], -2.0f);
    EXPECT_EQ(out[3], 3.0f);
    const float block = 2688.0f, amax = 1.0f;  // an effective scale of 1
    tk::UnpackNvfp4Args n{payload, 2, &block, 0, 0, &amax, out, 1, 4};
    tk::unpack_nvfp4_cpu(n, 1);
    EXPECT_EQ(out[0], -6.0f);  // code 15: sign bit, level 7
    EXPECT_EQ(out[1], 0.5f);
    EXPECT_EQ(out[2], 2.0f);
    EXPECT_EQ(out[3], -4.0f);
}

TEST(QuantKernels, ThreadCountDoesNotChangeBits) {
    const std::int64_t rows = 96, cols = 1000;
    const std::vector<float> x = random_values(rows * cols, 1);
    std::vector<float> scale(rows, 0.05f);
    auto run = [&](int threads) {
        std::vector<float> out(x.size()), fp4(x.size()), grouped(x.size()), scales(rows);
        std::vector<float> blocks(rows * ((cols + 15) / 16));
        tk::fake_quant_fp8_cpu({x.data(), scale.data(), out.data(), rows, cols, cols, cols, 1,
                                true}, threads);
        tk::fake_quant_int8_per_channel_cpu({x.data(), out.data(), scales.data(), 1, rows, cols,
                                             true}, threads);
        tk::fake_quant_fp4_cpu({x.data(), fp4.data(), blocks.data(), rows, cols,
                                tk::Fp4Format::nv, nullptr, nullptr}, threads);
        tk::IntGroupedArgs g{x.data(), grouped.data(), nullptr, 0, 0, rows, cols, cols, 128, 4};
        tk::fake_quant_int_grouped_cpu(g, threads);
        out.insert(out.end(), fp4.begin(), fp4.end());
        out.insert(out.end(), grouped.begin(), grouped.end());
        out.insert(out.end(), scales.begin(), scales.end());
        return out;
    };
    EXPECT_TRUE(same_bits(run(1), run(2)));
    EXPECT_TRUE(same_bits(run(1), run(0)));
}

TEST(FakeQuantIntGrouped, CodesAreThoseOfTheQuotientNearTies) {
    // Each code is round-half-even of w / s (torch's division, not a product with 1 / s) on
    // hard scales (all-ones mantissas, powers of two, random) and on weights at and next to
    // the ties of the rounding, across 2^-40..2^6 of the scale.
    std::mt19937 gen(7);
    std::uniform_int_distribution<std::uint32_t> mantissa(0, (1u << 23) - 1), exponent(107, 147);
    std::uniform_int_distribution<int> code(-64, 64), offset(-2, 2), magnitude(-40, 6);
    const std::int64_t rows = 256, cols = 256, group = 128, groups = cols / group;
    std::vector<float> w(rows * cols), scale(rows * groups), out(w.size());
    for (std::size_t i = 0; i < scale.size(); ++i) {
        const std::uint32_t m = i % 3 == 0 ? (1u << 23) - 1 : i % 3 == 1 ? 0 : mantissa(gen);
        const std::uint32_t bits = exponent(gen) << 23 | m;
        std::memcpy(&scale[i], &bits, sizeof bits);
    }
    for (std::size_t i = 0; i < w.size(); ++i) {
        const float s = scale[i / group];
        float v = i % 2 ? (code(gen) + 0.5f) * s  // a tie of the rounding, and its neighbours
                        : std::ldexp(1.0f + mantissa(gen) * 0x1p-23f, magnitude(gen)) * s;
        for (int k = offset(gen); k != 0; k += k > 0 ? -1 : 1)
            v = std::nextafter(v, k > 0 ? kInf : -kInf);
        w[i] = gen() % 2 ? -v : v;
    }
    tk::IntGroupedArgs a{w.data(), out.data(), scale.data(), groups, 1, rows, cols, cols, group,
                         16};
    tk::fake_quant_int_grouped_cpu(a, 2);
    for (std::size_t i = 0; i < w.size(); ++i) {
        const float s = scale[i / group];
        volatile float quotient = w[i] / s;
        volatile float product = std::fmin(std::fmax(std::nearbyint(quotient), -32768.0f),
                                           32767.0f) * s;
        volatile float step = product - w[i];
        const float want = w[i] + step;
        ASSERT_EQ(std::memcmp(&out[i], &want, sizeof want), 0)
            << "w=" << w[i] << " s=" << s << " got " << out[i] << " want " << want;
    }
}
