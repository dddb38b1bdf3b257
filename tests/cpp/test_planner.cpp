// tests/cpp/test_planner.cpp: closure, ordering, cycles, phases and conflicts of the group planner.
#include <gtest/gtest.h>

#include "turbo_physai/planner.h"

using turbo_physai::GroupNode;
using turbo_physai::plan_groups;
using turbo_physai::PlanError;

namespace {

GroupNode node(std::string id, std::vector<std::string> deps = {}, bool compat = false,
               std::vector<std::string> writes = {}) {
    return GroupNode{std::move(id), compat, std::move(deps), std::move(writes)};
}

std::string error_of(const std::vector<GroupNode> &catalog, const std::vector<std::string> &req) {
    try {
        plan_groups(catalog, req);
    } catch (const PlanError &e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Planner, ClosureAddsDependenciesBeforeDependents) {
    std::vector<GroupNode> catalog{node("b"), node("a", {"b"}), node("c")};
    auto plan = plan_groups(catalog, {"a"});
    EXPECT_EQ(plan.order, (std::vector<std::string>{"b", "a"}));
    EXPECT_EQ(plan.added, (std::vector<std::string>{"b"}));
}

TEST(Planner, DeclarationOrderBreaksTies) {
    std::vector<GroupNode> catalog{node("z"), node("y"), node("x")};
    auto plan = plan_groups(catalog, {"x", "z", "y"});
    EXPECT_EQ(plan.order, (std::vector<std::string>{"z", "y", "x"}));
}

TEST(Planner, DependencyDeclaredLaterStillComesFirst) {
    std::vector<GroupNode> catalog{node("a", {"c"}), node("b"), node("c")};
    auto plan = plan_groups(catalog, {"a", "b"});
    EXPECT_EQ(plan.order, (std::vector<std::string>{"b", "c", "a"}));
}

TEST(Planner, ImportCompatibilityGroupsComeFirst) {
    std::vector<GroupNode> catalog{node("r1"), node("i1", {}, true), node("r2", {"i2"}),
                                   node("i2", {}, true)};
    auto plan = plan_groups(catalog, {"r1", "i1", "r2"});
    EXPECT_EQ(plan.order, (std::vector<std::string>{"i1", "i2", "r1", "r2"}));
}

TEST(Planner, CycleErrorPrintsThePath) {
    std::vector<GroupNode> catalog{node("a", {"b"}), node("b", {"c"}), node("c", {"a"})};
    EXPECT_EQ(error_of(catalog, {"a"}), "dependency cycle: a -> b -> c -> a");
}

TEST(Planner, SelfDependencyIsACycle) {
    std::vector<GroupNode> catalog{node("a", {"a"})};
    EXPECT_EQ(error_of(catalog, {"a"}), "dependency cycle: a -> a");
}

TEST(Planner, UnknownGroupsAndDependenciesAreNamed) {
    std::vector<GroupNode> catalog{node("a", {"missing"})};
    EXPECT_EQ(error_of(catalog, {"a"}), "group 'a' depends_on unknown group 'missing'");
    EXPECT_EQ(error_of({node("a")}, {"nope"}), "unknown group 'nope'");
}

TEST(Planner, DuplicateAndEmptyIdsAreRejected) {
    EXPECT_EQ(error_of({node("a"), node("a")}, {"a"}), "group 'a' is declared twice");
    EXPECT_EQ(error_of({node("")}, {}), "group at position 0 has an empty ID");
}

TEST(Planner, ImportCompatMayNotDependOnRegularGroup) {
    std::vector<GroupNode> catalog{node("r"), node("i", {"r"}, true)};
    EXPECT_NE(error_of(catalog, {"i"}).find("import-compatibility group 'i'"), std::string::npos);
}

TEST(Planner, ConflictsNameBothGroupsAndThePath) {
    std::vector<GroupNode> catalog{node("a", {}, false, {"m.f", "m.g"}),
                                   node("b", {}, false, {"m.g"}), node("c", {}, false, {"m.h", "m.h"})};
    auto plan = plan_groups(catalog, {"a", "b", "c"});
    ASSERT_EQ(plan.conflicts.size(), 1u);
    EXPECT_EQ(plan.conflicts[0].path, "m.g");
    EXPECT_EQ(plan.conflicts[0].first, "a");
    EXPECT_EQ(plan.conflicts[0].second, "b");
}

TEST(Planner, DuplicateRequestsAndDiamondsAppearOnce) {
    std::vector<GroupNode> catalog{node("base"), node("l", {"base"}), node("r", {"base"}),
                                   node("top", {"l", "r", "base"})};
    auto plan = plan_groups(catalog, {"top", "top", "l"});
    EXPECT_EQ(plan.order, (std::vector<std::string>{"base", "l", "r", "top"}));
}

TEST(Planner, EmptyRequestGivesEmptyPlan) {
    auto plan = plan_groups({node("a")}, {});
    EXPECT_TRUE(plan.order.empty());
    EXPECT_TRUE(plan.conflicts.empty());
}

TEST(Planner, OnlyTheClosureIsValidated) {
    std::vector<GroupNode> catalog{node("ok"), node("broken", {"missing"})};
    EXPECT_EQ(plan_groups(catalog, {"ok"}).order, (std::vector<std::string>{"ok"}));
    EXPECT_THROW(turbo_physai::validate_catalog(catalog), PlanError);
}
