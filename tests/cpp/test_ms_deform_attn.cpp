// tests/cpp/test_ms_deform_attn.cpp: hand-checked values, borders, gradients, determinism of MSDA.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ms_deform_attn/ms_deform_attn.h"
#include "turbo_physai/interrupt.h"

namespace msda = turbo_physai::kernels::msda;

namespace {

/// Dense tensors of one problem, with the row-major strides the kernel is handed.
struct Case {
    std::int64_t N, M, D, Lq, P;
    std::vector<std::int64_t> shapes, starts;  // (L,2) and (L,)
    std::int64_t S = 0;
    std::vector<double> value, loc, attn;

    Case(std::int64_t n, std::int64_t m, std::int64_t d, std::int64_t lq, std::int64_t p,
         std::vector<std::int64_t> hw)
        : N(n), M(m), D(d), Lq(lq), P(p), shapes(std::move(hw)) {
        for (std::size_t l = 0; l < shapes.size() / 2; ++l) {
            starts.push_back(S);
            S += shapes[2 * l] * shapes[2 * l + 1];
        }
        value.assign(N * S * M * D, 0.0);
        loc.assign(N * Lq * M * L() * P * 2, 0.5);
        attn.assign(N * Lq * M * L() * P, 1.0);
    }
    std::int64_t L() const { return static_cast<std::int64_t>(starts.size()); }

    msda::Problem problem() const {
        return {N, S, M, D, Lq, P,
                msda::make_levels(shapes.data(), {2, 1}, starts.data(), 1, L(), S)};
    }
    msda::Inputs<double> inputs() const {
        const std::int64_t l = L();
        return {{value.data(), {S * M * D, M * D, D, 1}},
                {loc.data(), {Lq * M * l * P * 2, M * l * P * 2, l * P * 2, P * 2, 2, 1}},
                {attn.data(), {Lq * M * l * P, M * l * P, l * P, P, 1}}};
    }
    std::vector<double> forward(int threads = 0) const {
        std::vector<double> out(N * Lq * M * D, std::numeric_limits<double>::quiet_NaN());
        msda::forward<double>(problem(), inputs(), {out.data(), {Lq * M * D, M * D, D, 1}},
                              threads);
        return out;
    }
    /// Gradients of sum(out * g); returned as one vector: value, then loc, then attn.
    std::vector<double> backward(const std::vector<double> &g, int threads = 0) const {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        std::vector<double> gv(value.size(), nan), gl(loc.size(), nan), ga(attn.size(), nan);
        const msda::Inputs<double> in = inputs();
        msda::Gradients<double> grads{{gv.data(), in.value.stride},
                                      {gl.data(), in.sampling_locations.stride},
                                      {ga.data(), in.attention_weights.stride}};
        msda::backward<double>(problem(), in, {g.data(), {Lq * M * D, M * D, D, 1}}, grads,
                               threads);
        gv.insert(gv.end(), gl.begin(), gl.end());
        gv.insert(gv.end(), ga.begin(), ga.end());
        return gv;
    }
    void randomize(std::uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<double> u(-1.0, 1.0), pos(-0.1, 1.1);
        for (auto &x : value) x = u(rng);
        for (auto &x : loc) x = pos(rng);
        for (auto &x : attn) x = u(rng);
    }
};

double dot(const std::vector<double> &a, const std::vector<double> &b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

}  // namespace

TEST(MsDeformAttn, PixelCentreReadsThatPixelExactly) {
    Case c(1, 1, 2, 1, 1, {2, 3});
    c.value = {1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60};
    c.loc = {(2 + 0.5) / 3, (1 + 0.5) / 2};  // x = 2, y = 1: row 1 * 3 + 2 = 5
    c.attn = {0.5};
    EXPECT_EQ(c.forward(), (std::vector<double>{3.0, 30.0}));
}

TEST(MsDeformAttn, CentreOfFourPixelsAveragesThem) {
    Case c(1, 1, 1, 1, 1, {2, 2});
    c.value = {1, 2, 3, 4};
    c.loc = {0.5, 0.5};  // x = y = 0.5
    EXPECT_DOUBLE_EQ(c.forward()[0], 2.5);
}

TEST(MsDeformAttn, BordersUseZeroPadding) {
    Case c(1, 1, 1, 1, 1, {2, 2});
    c.value = {1, 2, 3, 4};
    const auto at = [&](double x, double y) {
        c.loc = {x, y};
        return c.forward()[0];
    };
    EXPECT_DOUBLE_EQ(at(0.0, 0.0), 0.25);       // pixel (-0.5, -0.5): a quarter of pixel 0
    EXPECT_DOUBLE_EQ(at(1.0, 0.25), 0.5 * 2);   // x = 1.5: half of pixel (0, 1)
    EXPECT_DOUBLE_EQ(at(0.25, 1.0), 0.5 * 3);   // y = 1.5: half of pixel (1, 0)
    EXPECT_EQ(at(1.25, 0.5), 0.0);              // x = 2: no corner inside
    EXPECT_EQ(at(-0.25, 0.5), 0.0);             // x = -1: its inside corner has weight 0
    EXPECT_EQ(at(-0.3, 0.5), 0.0);              // x < -1: no corner inside
    EXPECT_EQ(at(0.5, 7.0), 0.0);
    EXPECT_TRUE(std::isnan(at(std::nan(""), 0.5)));  // grid_sample's NaN weights (issue 24)
    EXPECT_TRUE(std::isnan(at(0.5, -HUGE_VAL)));
    EXPECT_EQ(at(0.5, -1e30), 0.0);             // far outside: no integer overflow
}

TEST(MsDeformAttn, NonFinitePointsFollowGridSample) {
    // A NaN location: row NaN; weight gradient NaN; location gradient NaN in the coordinate
    // whose other coordinate is not finite, 0 in the other; nothing added to grad_value.
    Case c(1, 1, 2, 2, 1, {2, 2});
    c.value = {1, 2, 3, 4, 5, 6, 7, 8};
    c.loc = {std::nan(""), 0.5, 0.5, 0.5};
    const std::vector<double> out = c.forward();
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
    EXPECT_DOUBLE_EQ(out[2], 4.0);  // the other query is untouched
    const std::vector<double> g = c.backward({1, 1, 0, 0});
    for (int i = 0; i < 8; ++i)
        EXPECT_EQ(g[i], 0.0) << i;  // grad_value: the NaN point adds nothing, query 1 has g = 0
    EXPECT_EQ(g[8], 0.0);           // d x: y is finite
    EXPECT_TRUE(std::isnan(g[9]));  // d y: x is not
    EXPECT_TRUE(std::isnan(g[12])); // d weight
    // A +Inf weight outside the map: Inf * 0 = NaN; inside: +-Inf times the bilinear sample.
    c.loc = {3.0, 0.5, 0.5, 0.5};
    c.attn = {HUGE_VAL, -HUGE_VAL};
    const std::vector<double> scaled = c.forward();
    EXPECT_TRUE(std::isnan(scaled[0]) && std::isnan(scaled[1]));
    EXPECT_EQ(scaled[2], -HUGE_VAL);
    EXPECT_EQ(scaled[3], -HUGE_VAL);
}

TEST(MsDeformAttn, EmptyOutputReturnsWithoutVisitingPoints) {
    // D = 0 with 2^40 queries whose locations are one element (stride 0): returns at once.
    Case c(1, 1, 0, 1, 1, {2, 2});
    msda::Problem p = c.problem();
    p.queries = std::int64_t{1} << 40;
    msda::Inputs<double> in = c.inputs();
    in.sampling_locations.stride[1] = 0;
    in.attention_weights.stride[1] = 0;
    double out = 0;
    msda::forward<double>(p, in, {&out, {0, 0, 0, 1}}, 0);
    EXPECT_EQ(out, 0.0);  // nothing written
}

TEST(MsDeformAttn, AStopFlagEndsTheCallWithInterrupted) {
    Case c(1, 1, 4, 64, 4, {4, 4});
    c.randomize(2);
    std::atomic<bool> stop{true};
    msda::Problem p = c.problem();
    p.stop = &stop;
    std::vector<double> out(c.N * c.Lq * c.M * c.D), g(out.size(), 1.0);
    EXPECT_THROW(msda::forward<double>(p, c.inputs(), {out.data(), {c.Lq * c.D, c.D, c.D, 1}}, 0),
                 turbo_physai::Interrupted);
    std::vector<double> gv(c.value.size()), gl(c.loc.size()), ga(c.attn.size());
    const msda::Inputs<double> in = c.inputs();
    EXPECT_THROW(msda::backward<double>(p, in, {g.data(), {c.Lq * c.D, c.D, c.D, 1}},
                                        {{gv.data(), in.value.stride},
                                         {gl.data(), in.sampling_locations.stride},
                                         {ga.data(), in.attention_weights.stride}},
                                        0),
                 turbo_physai::Interrupted);
}

TEST(MsDeformAttn, LevelsHeadsAndBatchesIndexTheirOwnSlices) {
    // Two levels (1x1 and 2x1), two heads, two batches: every value is distinct, every point sits
    // on a pixel centre, so each output is one value times its attention weight.
    Case c(2, 2, 1, 1, 1, {1, 1, 2, 1});
    for (std::size_t i = 0; i < c.value.size(); ++i) c.value[i] = static_cast<double>(i + 1);
    // loc[n][q][m][l][p][xy]: level 0 (1x1) at its centre, level 1 (2 rows) at row 1.
    for (std::int64_t nm = 0; nm < 4; ++nm) {
        c.loc[nm * 4 + 0] = 0.5, c.loc[nm * 4 + 1] = 0.5;
        c.loc[nm * 4 + 2] = 0.5, c.loc[nm * 4 + 3] = 0.75;
        c.attn[nm * 2 + 0] = 1.0, c.attn[nm * 2 + 1] = 10.0;
    }
    // value[n][s][m]: s = 0 (level 0), s = 2 (level 1, row 1) -> index (n*3 + s)*2 + m, plus 1.
    std::vector<double> expected;
    for (int n = 0; n < 2; ++n)
        for (int m = 0; m < 2; ++m)
            expected.push_back((n * 3 + 0) * 2 + m + 1 + 10.0 * ((n * 3 + 2) * 2 + m + 1));
    EXPECT_EQ(c.forward(), expected);
}

TEST(MsDeformAttn, OutputAndGradientsAreFullyWritten) {
    Case c(2, 3, 5, 4, 2, {3, 4, 2, 2});
    c.randomize(1);
    c.loc[0] = 5.0;  // one point outside: its gradients must still be written (as zeros)
    for (double x : c.forward()) EXPECT_FALSE(std::isnan(x));
    const std::vector<double> g(c.N * c.Lq * c.M * c.D, 1.0);
    for (double x : c.backward(g)) EXPECT_FALSE(std::isnan(x));
}

TEST(MsDeformAttn, GradientsMatchFiniteDifferences) {
    Case c(2, 2, 3, 3, 2, {3, 5, 2, 3});
    c.randomize(7);
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> g(c.N * c.Lq * c.M * c.D);
    for (auto &x : g) x = u(rng);
    const std::vector<double> grads = c.backward(g);
    const double eps = 1e-6;
    std::size_t offset = 0;
    for (std::vector<double> *t : {&c.value, &c.loc, &c.attn}) {
        for (std::size_t i = 0; i < t->size(); ++i) {
            const double keep = (*t)[i];
            (*t)[i] = keep + eps;
            const double up = dot(c.forward(), g);
            (*t)[i] = keep - eps;
            const double down = dot(c.forward(), g);
            (*t)[i] = keep;
            EXPECT_NEAR(grads[offset + i], (up - down) / (2 * eps), 1e-6) << "element " << i;
        }
        offset += t->size();
    }
}

TEST(MsDeformAttn, BitIdenticalAcrossThreadCounts) {
    Case c(2, 4, 16, 50, 4, {8, 8, 4, 4, 2, 2});
    c.randomize(11);
    std::vector<double> g(c.N * c.Lq * c.M * c.D, 0.25);
    const auto f1 = c.forward(1), f2 = c.forward(0);
    const auto b1 = c.backward(g, 1), b2 = c.backward(g, 0);
    EXPECT_EQ(std::memcmp(f1.data(), f2.data(), f1.size() * sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(b1.data(), b2.data(), b1.size() * sizeof(double)), 0);
}

TEST(MsDeformAttn, StridedInputsGiveTheSameResult) {
    Case c(1, 2, 4, 3, 2, {3, 3});
    c.randomize(5);
    // The same locations stored x-plane then y-plane: (x,y) stride = all other elements.
    const std::int64_t half = static_cast<std::int64_t>(c.loc.size() / 2);
    std::vector<double> planar(c.loc.size());
    for (std::int64_t i = 0; i < half; ++i)
        planar[i] = c.loc[2 * i], planar[half + i] = c.loc[2 * i + 1];
    msda::Inputs<double> in = c.inputs();
    const std::int64_t L = c.L(), P = c.P;
    in.sampling_locations = {planar.data(), {half, c.M * L * P, L * P, P, 1, half}};
    std::vector<double> out(c.N * c.Lq * c.M * c.D);
    msda::forward<double>(c.problem(), in, {out.data(), {c.Lq * c.M * c.D, c.M * c.D, c.D, 1}}, 0);
    EXPECT_EQ(out, c.forward());
}

TEST(MsDeformAttn, RejectsInconsistentLevels) {
    const std::vector<std::int64_t> shapes{4, 4, 2, 2};
    const auto levels = [&](std::vector<std::int64_t> starts, std::int64_t S) {
        return msda::make_levels(shapes.data(), {2, 1}, starts.data(), 1, 2, S);
    };
    EXPECT_EQ(levels({0, 16}, 20).size(), 2u);
    EXPECT_THROW(levels({0, 15}, 20), std::invalid_argument);
    EXPECT_THROW(levels({0, 16}, 21), std::invalid_argument);
    const std::vector<std::int64_t> negative{-1, 4}, start{0};
    EXPECT_THROW(msda::make_levels(negative.data(), {2, 1}, start.data(), 1, 1, 0),
                 std::invalid_argument);
}

TEST(MsDeformAttn, RequiresDenseChannels) {
    Case c(1, 1, 2, 1, 1, {1, 2});
    msda::Inputs<double> in = c.inputs();
    in.value.stride = {4, 1, 2, 2};  // channels two apart
    std::vector<double> out(2);
    EXPECT_THROW(msda::forward<double>(c.problem(), in, {out.data(), {2, 2, 2, 1}}, 1),
                 std::invalid_argument);
}
