// tests/cpp/test_kernel_registry.cpp: slot table order, selection, caching, requirements, threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "turbo_physai/kernel_registry.h"

namespace {

using turbo_physai::Device;
using turbo_physai::DType;
using turbo_physai::ImplInfo;
using turbo_physai::Requirements;
using turbo_physai::Selection;
using Registry = turbo_physai::KernelRegistry<int>;

ImplInfo info(const std::string &name, bool hub = false, bool provider = false) {
    ImplInfo i;
    i.name = name;
    i.hub = hub;
    i.provider = provider;
    return i;
}

std::vector<std::string> names(Registry &r, const std::string &slot) {
    std::vector<std::string> out;
    for (const auto &e : *r.candidates(*r.slot(slot)))
        out.push_back(e->info.name);
    return out;
}

// Each test starts from unset override variables and leaves them unset.
struct RegistryTest : ::testing::Test {
    void SetUp() override { clear(); }
    void TearDown() override { clear(); }
    static void clear() {
        unsetenv(Selection::kKernelsVar);
        unsetenv(Selection::kHubVar);
    }
    Registry r;
};

TEST_F(RegistryTest, NewestFirstReferenceLast) {
    r.add("op", info("reference"), 0);
    r.add("op", info("a"), 1);
    r.add("op", info("b"), 2);
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"b", "a", "reference"}));
    // The reference stays the fallback even when registered late.
    r.add("late", info("x"), 1);
    r.add("late", info("reference"), 0);
    EXPECT_EQ(names(r, "late"), (std::vector<std::string>{"x", "reference"}));
}

TEST_F(RegistryTest, LazilyLoadedProvidersRankBelowProgramRegistrations) {
    r.add("op", info("reference", false, true), 0);
    r.add("op", info("mine"), 1);
    r.add("op", info("builtin", false, true), 2);  // loaded on first use, after "mine"
    r.add("op", info("plugin", false, true), 3);
    r.add("op", info("mine2"), 4);
    EXPECT_EQ(names(r, "op"),
              (std::vector<std::string>{"mine2", "mine", "plugin", "builtin", "reference"}));
}

TEST_F(RegistryTest, DuplicateNameIsAnErrorAndOrderIsKept) {
    r.add("op", info("a"), 1);
    r.add("op", info("b"), 2);
    EXPECT_THROW(r.add("op", info("a"), 3), std::invalid_argument);
    const auto entries = r.entries(*r.slot("op"));
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0]->info.name, "a");
    EXPECT_EQ(entries[0]->impl, 1);
    // The same name on another slot is fine.
    EXPECT_NO_THROW(r.add("other", info("a"), 4));
}

TEST_F(RegistryTest, UnregisterRemovesAndMissingNamesAreANoOp) {
    r.add("op", info("a"), 1);
    r.add("op", info("b"), 2);
    EXPECT_TRUE(r.remove("op", "b"));
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"a"}));
    EXPECT_FALSE(r.remove("op", "b"));
    EXPECT_FALSE(r.remove("op", "zzz"));
    EXPECT_FALSE(r.remove("nope", "a"));
    EXPECT_EQ(r.find("nope"), nullptr);  // a no-op creates no slot
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"a"}));
}

TEST_F(RegistryTest, NamesThatCouldNeverBeSelectedAreRejected) {
    auto rejects = [this](const std::string &slot, const std::string &name, const char *what) {
        try {
            r.add(slot, info(name), 0);
            ADD_FAILURE() << "accepted slot '" << slot << "' name '" << name << "'";
        } catch (const std::invalid_argument &e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    rejects("", "a", "slot name must not be empty");
    rejects(" op", "a", "must not start or end with whitespace");
    rejects("op", "", "implementation name must not be empty");
    rejects("op", "a\n", "must not start or end with whitespace");
    rejects("op", "OFF", "is reserved");
    rejects("op", "Reference", "is reserved");
    EXPECT_EQ(r.find(""), nullptr);
    EXPECT_EQ(r.find("op"), nullptr);  // nothing was created by the rejected calls
    EXPECT_NO_THROW(r.add("op", info("reference"), 0));
    EXPECT_NO_THROW(r.add("op", info("offload"), 1));
}

TEST_F(RegistryTest, CacheIsReusedThenInvalidatedByEveryChange) {
    r.add("op", info("reference"), 0);
    r.add("op", info("a"), 1);
    auto s = r.slot("op");
    auto first = r.candidates(*s);
    EXPECT_EQ(first, r.candidates(*s));  // same list object: cached

    r.add("op", info("b"), 2);
    auto after_add = r.candidates(*s);
    EXPECT_NE(after_add, first);
    EXPECT_EQ(after_add->front()->info.name, "b");

    const auto &b = *after_add->front();
    EXPECT_TRUE(r.disable(*s, b, "RuntimeError: boom"));
    EXPECT_FALSE(r.disable(*s, b, "again"));  // second disable reports nothing new: one warning
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"a", "reference"}));
    EXPECT_TRUE(b.disabled());
    EXPECT_EQ(r.failure(b), "RuntimeError: boom");

    setenv(Selection::kKernelsVar, "off", 1);
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"reference"}));
    setenv(Selection::kKernelsVar, "a", 1);
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"a", "reference"}));
    unsetenv(Selection::kKernelsVar);
    r.remove("op", "a");
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"reference"}));
}

TEST_F(RegistryTest, DisableBelongsToTheRegistrationNotTheName) {
    r.add("op", info("reference"), 0);
    r.add("op", info("fast"), 1);
    auto s = r.slot("op");
    const auto old = r.candidates(*s)->front();
    r.disable(*s, *old, "ImportError: libfoo.so");
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"reference"}));
    r.remove("op", "fast");
    r.add("op", info("fast"), 2);  // a new implementation under the same name runs
    const auto now = r.candidates(*s);
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"fast", "reference"}));
    EXPECT_EQ(now->front()->impl, 2);
    EXPECT_FALSE(now->front()->disabled());
    EXPECT_TRUE(old->disabled());
}

TEST_F(RegistryTest, AdmitRunsOncePerRebuildNeverForTheReference) {
    r.add("op", info("reference"), 0);
    r.add("op", info("env_no"), 1);
    r.add("op", info("env_yes"), 2);
    auto s = r.slot("op");
    std::vector<std::string> asked;
    auto admit = [&](const Registry::Entry &e) {
        asked.push_back(e.info.name);
        return e.info.name != "env_no";
    };
    auto first = r.candidates(*s, admit);
    EXPECT_EQ(first->size(), 2u);
    EXPECT_EQ(asked, (std::vector<std::string>{"env_yes", "env_no"}));
    EXPECT_EQ(r.candidates(*s, admit), first);  // cached: admit not asked again
    EXPECT_EQ(asked.size(), 2u);
    r.clear();  // clear_cache(): the answers are asked again
    EXPECT_NE(r.candidates(*s, admit), first);
    EXPECT_EQ(asked.size(), 4u);
    r.candidates(*s, admit, /*fresh=*/true);  // iter_impls: asked afresh even when cached
    EXPECT_EQ(asked.size(), 6u);
}

TEST_F(RegistryTest, AdmitMayChangeTheRegistryAndThatListIsNotCached) {
    r.add("op", info("reference"), 0);
    r.add("op", info("a"), 1);
    auto s = r.slot("op");
    bool registered = false;
    auto admit = [&](const Registry::Entry &) {
        if (!registered) {  // runs without the lock: no deadlock
            registered = true;
            r.add("op", info("late"), 2);
        }
        return true;
    };
    const auto during = r.candidates(*s, admit);
    EXPECT_EQ(during->size(), 2u);  // built from the snapshot taken before the change
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"late", "a", "reference"}));
}

TEST_F(RegistryTest, SelectionParsing) {
    EXPECT_EQ(Selection::parse(nullptr, nullptr).mode, Selection::Mode::all);
    EXPECT_EQ(Selection::parse("  ", nullptr).mode, Selection::Mode::all);
    EXPECT_EQ(Selection::parse("OFF", nullptr).mode, Selection::Mode::reference_only);
    EXPECT_EQ(Selection::parse(" Reference\n", nullptr).mode, Selection::Mode::reference_only);
    const Selection named = Selection::parse(" mybackend ", nullptr);
    EXPECT_EQ(named.mode, Selection::Mode::named);
    EXPECT_EQ(named.name, "mybackend");
    EXPECT_TRUE(named.admits(info("mybackend")));
    EXPECT_FALSE(named.admits(info("MyBackend")));
    EXPECT_TRUE(named.admits(info("reference")));
    for (const char *off : {"0", "false", "Off", " no "})
        EXPECT_FALSE(Selection::parse(nullptr, off).hub) << off;
    EXPECT_TRUE(Selection::parse(nullptr, "1").hub);
    EXPECT_FALSE(Selection::parse(nullptr, "0").admits(info("h", true)));
    EXPECT_TRUE(Selection::parse(nullptr, "0").admits(info("h", false)));
}

TEST_F(RegistryTest, HubVariableFiltersHubImplementations) {
    r.add("op", info("reference"), 0);
    r.add("op", info("hub", true), 1);
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"hub", "reference"}));
    setenv(Selection::kHubVar, "0", 1);
    EXPECT_EQ(names(r, "op"), (std::vector<std::string>{"reference"}));
}

struct FakeTensor {
    Device dev = Device::cpu;
    DType dt = DType::float32;
    int rk = 2;
    bool contig = true;
    int reads = 0;
    Device device() { ++reads; return dev; }
    DType dtype() { ++reads; return dt; }
    int rank() { ++reads; return rk; }
    bool contiguous() { ++reads; return contig; }
};

TEST(Requirements, ChecksEachPropertyAndReadsOnlyWhatItNeeds) {
    int captures = 0;
    auto capturing = [&] { ++captures; return true; };
    Requirements none;
    FakeTensor t;
    EXPECT_FALSE(none.any());
    EXPECT_TRUE(none.accepts(t, capturing));
    EXPECT_EQ(t.reads, 0);

    Requirements cpu_f32;
    cpu_f32.devices = 1u << static_cast<unsigned>(Device::cpu);
    cpu_f32.dtypes = 1u << static_cast<unsigned>(DType::float32);
    cpu_f32.contiguous = true;
    cpu_f32.min_rank = 1;
    cpu_f32.max_rank = 3;
    EXPECT_TRUE(cpu_f32.accepts(t, capturing));
    FakeTensor cuda = t;
    cuda.dev = Device::cuda;
    EXPECT_FALSE(cpu_f32.accepts(cuda, capturing));
    FakeTensor half = t;
    half.dt = DType::float16;
    EXPECT_FALSE(cpu_f32.accepts(half, capturing));
    FakeTensor strided = t;
    strided.contig = false;
    EXPECT_FALSE(cpu_f32.accepts(strided, capturing));
    FakeTensor scalar = t, big = t;
    scalar.rk = 0;
    big.rk = 4;
    EXPECT_FALSE(cpu_f32.accepts(scalar, capturing));
    EXPECT_FALSE(cpu_f32.accepts(big, capturing));
    EXPECT_EQ(captures, 0);

    Requirements no_capture;
    no_capture.graph_capture = false;
    EXPECT_TRUE(no_capture.accepts(t, capturing));  // CPU tensors never ask
    EXPECT_EQ(captures, 0);
    EXPECT_FALSE(no_capture.accepts(cuda, capturing));
    EXPECT_EQ(captures, 1);
}

TEST(Names, RoundTripAndErrors) {
    EXPECT_EQ(turbo_physai::dtype_from_name("bfloat16"), DType::bfloat16);
    EXPECT_STREQ(turbo_physai::dtype_name(DType::float8_e4m3fn), "float8_e4m3fn");
    EXPECT_EQ(turbo_physai::device_from_name("cuda"), Device::cuda);
    try {
        turbo_physai::dtype_from_name("float33");
        FAIL();
    } catch (const std::invalid_argument &e) {
        EXPECT_NE(std::string(e.what()).find("unknown dtype 'float33'"), std::string::npos);
    }
    EXPECT_THROW(turbo_physai::device_from_name("gpu"), std::invalid_argument);
}

TEST_F(RegistryTest, ConcurrentRegistrationAndLookup) {
    r.add("op", info("reference"), 0);
    constexpr int kThreads = 4, kPerThread = 200;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([this, t] {
            auto s = r.slot("op");
            for (int i = 0; i < kPerThread; ++i) {
                r.add("op", info("t" + std::to_string(t) + "_" + std::to_string(i)), i);
                auto c = r.candidates(*s);
                ASSERT_EQ(c->back()->info.name, "reference");
            }
        });
    }
    for (auto &th : threads)
        th.join();
    EXPECT_EQ(r.entries(*r.slot("op")).size(), 1u + kThreads * kPerThread);
    EXPECT_EQ(names(r, "op").size(), 1u + kThreads * kPerThread);
}

TEST_F(RegistryTest, ConcurrentDisableClearAndRebuildKeepTheReferenceLast) {
    r.add("op", info("reference"), 0);
    for (int i = 0; i < 64; ++i)
        r.add("op", info("i" + std::to_string(i)), i + 1);
    auto s = r.slot("op");
    std::atomic<int> admitted{0};
    auto admit = [&](const Registry::Entry &e) {
        ++admitted;
        return e.impl % 3 != 0;  // an environment predicate saying no to every third
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 300; ++i) {
                auto c = r.candidates(*s, admit, /*fresh=*/i % 7 == 0);
                ASSERT_FALSE(c->empty());
                ASSERT_EQ(c->back()->info.name, "reference");
                for (const auto &e : *c)
                    ASSERT_TRUE(e->info.is_reference() || e->impl % 3 != 0);
                if (t == 0 && i % 5 == 0)
                    r.clear();
                if (t == 1 && c->size() > 1)
                    r.disable(*s, *c->front(), "RuntimeError");
            }
        });
    }
    for (auto &th : threads)
        th.join();
    EXPECT_GT(admitted.load(), 0);
    EXPECT_EQ(r.candidates(*s, admit)->back()->info.name, "reference");
}

}  // namespace
