// tests/cpp/test_parallel.cpp: parallel_for covers each index once, nests, rethrows, survives fork.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#if !defined(_WIN32)
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "turbo_physai/parallel.h"

using turbo_physai::parallel_for;

namespace {

std::vector<int> visits(std::int64_t n, std::int64_t grain, int threads) {
    std::vector<std::atomic<int>> count(static_cast<std::size_t>(n));
    parallel_for(n, grain, threads, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i)
            count[static_cast<std::size_t>(i)].fetch_add(1);
    });
    return std::vector<int>(count.begin(), count.end());
}

}  // namespace

TEST(ParallelFor, EveryIndexExactlyOnce) {
    for (int threads : {0, 1, 2, 8})
        for (std::int64_t grain : {1, 3, 1000})
            EXPECT_EQ(visits(1001, grain, threads), std::vector<int>(1001, 1));
    EXPECT_TRUE(visits(0, 1, 2).empty());
}

TEST(ParallelFor, NestedCallsRunInline) {
    std::atomic<std::int64_t> total{0};
    parallel_for(8, 1, 0, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i)
            parallel_for(10, 1, 0, [&](std::int64_t b2, std::int64_t e2) { total += e2 - b2; });
    });
    EXPECT_EQ(total.load(), 80);
}

TEST(ParallelFor, RethrowsTheBodysException) {
    EXPECT_THROW(parallel_for(100, 1, 0,
                              [](std::int64_t b, std::int64_t) {
                                  if (b == 57)
                                      throw std::runtime_error("chunk 57");
                              }),
                 std::runtime_error);
    EXPECT_EQ(visits(100, 1, 0), std::vector<int>(100, 1));  // usable afterwards
}

#if !defined(_WIN32)
TEST(ParallelFor, ForkedChildBuildsItsOwnPool) {
    visits(1000, 1, 0);  // the parent's pool exists now
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(20);  // a child waiting on the parent's (absent) workers dies instead of hanging
        _exit(visits(1000, 1, 0) == std::vector<int>(1000, 1) ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
#endif
