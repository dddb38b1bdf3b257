// csrc/core/include/turbo_physai/parallel.h: a framework-free parallel_for over a persistent pool.
#pragma once

#include <cstdint>
#include <functional>

namespace turbo_physai {

/// Number of hardware threads (at least 1); the pool never runs more threads than this.
int hardware_threads();

/// Calls `body(begin, end)` on disjoint chunks covering [0, n), each at most `grain` long, on up to
/// `max_threads` threads (the caller is one of them; <= 0 means all hardware threads).
///
/// Chunks are handed out dynamically, so the order in which chunks run is not fixed: a kernel stays
/// deterministic by making each output element the property of exactly one index. The threads are
/// those of the process's OpenMP team when libgomp is already loaded (torch's: sharing it keeps
/// torch's spinning workers and ours from fighting over the cores), else a pool of our own created
/// once. A nested call, or a call while another thread is using our pool, runs serially on the
/// caller instead of waiting. The first exception thrown by `body` is rethrown here at the end.
void parallel_for(std::int64_t n, std::int64_t grain, int max_threads,
                  const std::function<void(std::int64_t, std::int64_t)> &body);

}  // namespace turbo_physai
