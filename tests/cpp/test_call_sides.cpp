// tests/cpp/test_call_sides.cpp: how a gate classifies a thread's stack during a transition.
#include <gtest/gtest.h>

#include <vector>

#include "turbo_physai/call_sides.h"

namespace {

using turbo_physai::Side;
using Sides = turbo_physai::CallSides<int>;

// A stack as the bindings walk it: innermost frame first.
auto stack(std::vector<int> innermost_first) {
    return [frames = std::move(innermost_first)](auto &&visit) {
        for (int code : frames)
            visit(code);
    };
}

TEST(CallSides, SideOfEachCode) {
    Sides s({1, 2}, {3, 4});
    EXPECT_EQ(s.side_of(1), Side::old_side);
    EXPECT_EQ(s.side_of(4), Side::new_side);
    EXPECT_EQ(s.side_of(9), Side::none);
    EXPECT_FALSE(s.empty());
}

TEST(CallSides, OutermostGroupFrameDecides) {
    Sides s({1}, {3});
    // A new wrapper (3) calling the original it wraps (1): the call started on the new side.
    EXPECT_EQ(s.outermost(stack({1, 3, 7})), Side::new_side);
    // The original calling a new function through a reference kept from before: old side.
    EXPECT_EQ(s.outermost(stack({7, 3, 8, 1, 9})), Side::old_side);
    EXPECT_EQ(s.outermost(stack({7, 8})), Side::none);
    EXPECT_EQ(s.outermost(stack({})), Side::none);
}

TEST(CallSides, CodesOnBothSidesAreDropped) {
    Sides s({1, 2, 2}, {2, 3});
    EXPECT_EQ(s.side_of(2), Side::none);
    EXPECT_EQ(s.outermost(stack({1, 2})), Side::old_side);
    EXPECT_EQ(s.outermost(stack({2})), Side::none);
    EXPECT_TRUE(Sides({5}, {5}).empty());
}

TEST(CallSides, GateRoutesToTheCallersSideElseTheTarget) {
    EXPECT_TRUE(Sides::routes_new(Side::none, Side::new_side));
    EXPECT_FALSE(Sides::routes_new(Side::none, Side::old_side));
    EXPECT_FALSE(Sides::routes_new(Side::old_side, Side::new_side));  // apply: in-flight old call
    EXPECT_TRUE(Sides::routes_new(Side::new_side, Side::old_side));   // rollback: in-flight new
    EXPECT_TRUE(Sides::routes_new(Side::new_side, Side::new_side));
}

TEST(CallSides, OnlyCallsOnTheSideBeingLeftHoldTheTransitionBack) {
    EXPECT_TRUE(Sides::holds_back(Side::old_side, Side::new_side));
    EXPECT_TRUE(Sides::holds_back(Side::new_side, Side::old_side));
    EXPECT_FALSE(Sides::holds_back(Side::new_side, Side::new_side));
    EXPECT_FALSE(Sides::holds_back(Side::none, Side::new_side));
    EXPECT_FALSE(Sides::holds_back(Side::none, Side::old_side));
}

}  // namespace
