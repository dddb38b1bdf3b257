// tests/cpp/test_journal.cpp: the patch journal over an in-memory store.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "turbo_physai/journal.h"

namespace {

// Objects are shared_ptr<int>: identity is pointer equality, as `is` in Python.
struct MapStore {
    using Ref = std::shared_ptr<int>;
    using Owner = std::shared_ptr<std::map<std::string, Ref>>;
    std::set<std::string> read_only;

    std::optional<Ref> read(const Owner &owner, const std::string &name) const {
        auto it = owner->find(name);
        if (it == owner->end())
            return std::nullopt;
        return it->second;
    }
    void write(const Owner &owner, const std::string &name, const Ref &value) const {
        if (read_only.count(name))
            throw std::runtime_error("read-only attribute " + name);
        (*owner)[name] = value;
    }
    void erase(const Owner &owner, const std::string &name) const { owner->erase(name); }
    static bool same(const Ref &a, const Ref &b) { return a.get() == b.get(); }
};

using Journal = turbo_physai::Journal<MapStore>;
using Ref = MapStore::Ref;

struct JournalTest : ::testing::Test {
    MapStore::Owner owner = std::make_shared<std::map<std::string, Ref>>();
    Ref f = std::make_shared<int>(1), g = std::make_shared<int>(2);
    Ref r1 = std::make_shared<int>(10), r2 = std::make_shared<int>(20);
    void SetUp() override { (*owner)["f"] = f; }
};

}  // namespace

TEST_F(JournalTest, RestoresOriginalObjectAndDeletesWhatWasAbsent) {
    Journal j;
    auto a = j.snapshot(owner, "f", "m.f", "g1");
    auto b = j.snapshot(owner, "new", "m.new", "g1");
    j.install(a, r1);
    j.install(b, r2);
    EXPECT_TRUE(j.active());
    auto report = j.restore_all();
    EXPECT_EQ(report.restored, (std::vector<std::string>{"m.new", "m.f"}));
    EXPECT_EQ(owner->at("f").get(), f.get());
    EXPECT_EQ(owner->count("new"), 0u);
    EXPECT_FALSE(j.active());
}

TEST_F(JournalTest, ReverseOrderUndoesStackedWritesToTheSameName) {
    Journal j;
    auto a = j.snapshot(owner, "f", "m.f", "g1");
    j.install(a, r1);
    auto b = j.snapshot(owner, "f", "m.f", "g2");
    j.install(b, r2);
    j.restore_all();
    EXPECT_EQ(owner->at("f").get(), f.get());
}

TEST_F(JournalTest, GroupRestoreLeavesOtherGroupsInstalled) {
    Journal j;
    (*owner)["g"] = g;
    auto a = j.snapshot(owner, "f", "m.f", "g1");
    auto b = j.snapshot(owner, "g", "m.g", "g2");
    j.install(a, r1);
    j.install(b, r2);
    auto report = j.restore_group("g2");
    EXPECT_EQ(report.restored, (std::vector<std::string>{"m.g"}));
    EXPECT_EQ(owner->at("f").get(), r1.get());
    EXPECT_EQ(owner->at("g").get(), g.get());
    EXPECT_TRUE(j.active());
}

TEST_F(JournalTest, ThirdPartyPatchOnTopIsReportedNotClobbered) {
    Journal j;
    auto a = j.snapshot(owner, "f", "m.f", "g1");
    j.install(a, r1);
    Ref theirs = std::make_shared<int>(99);
    (*owner)["f"] = theirs;
    auto report = j.restore_all();
    EXPECT_EQ(report.drifted, (std::vector<std::string>{"m.f"}));
    EXPECT_TRUE(report.restored.empty());
    EXPECT_EQ(owner->at("f").get(), theirs.get());
}

TEST_F(JournalTest, FailedInstallRecordsNothingToUndo) {
    MapStore store;
    store.read_only.insert("locked");
    Journal j(store);
    (*owner)["locked"] = g;
    auto a = j.snapshot(owner, "f", "m.f", "g1");
    auto b = j.snapshot(owner, "locked", "m.locked", "g1");
    j.install(a, r1);
    EXPECT_THROW(j.install(b, r2), std::runtime_error);
    auto report = j.restore_group("g1");
    EXPECT_EQ(report.restored, (std::vector<std::string>{"m.f"}));
    EXPECT_EQ(owner->at("f").get(), f.get());
    EXPECT_EQ(owner->at("locked").get(), g.get());
}

TEST_F(JournalTest, RestoreWriteFailureIsReportedAndOthersStillRestore) {
    MapStore store;
    Journal j(store);
    auto a = j.snapshot(owner, "f", "m.f", "g1");
    j.install(a, r1);
    auto b = j.snapshot(owner, "x", "m.x", "g1");
    j.install(b, r2);
    // The owner starts refusing writes to "f" after install: restoring it must fail loudly.
    const_cast<MapStore &>(j.store()).read_only.insert("f");
    auto report = j.restore_all();
    EXPECT_EQ(report.restored, (std::vector<std::string>{"m.x"}));
    ASSERT_EQ(report.failed.size(), 1u);
    EXPECT_EQ(report.failed[0].first, "m.f");
    EXPECT_NE(report.failed[0].second.find("read-only"), std::string::npos);
}

TEST_F(JournalTest, ClosedEntriesRejectInstallAndCompactDropsThem) {
    Journal j;
    auto a = j.snapshot(owner, "f", "m.f", "g1");
    j.install(a, r1);
    j.restore_all();
    EXPECT_THROW(j.install(a, r2), std::logic_error);
    EXPECT_THROW(j.install(42, r2), std::out_of_range);
    j.compact();
    EXPECT_TRUE(j.entries().empty());
}
