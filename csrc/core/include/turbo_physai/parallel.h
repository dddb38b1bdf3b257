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
/// deterministic by making each output element the property of exactly one index. Threads are
/// created once and reused (spawning threads per call would cost more than a small kernel).
/// A nested call, or a call while another thread is using the pool, runs serially on the caller
/// instead of waiting. The first exception thrown by `body` is rethrown here after all chunks end.
void parallel_for(std::int64_t n, std::int64_t grain, int max_threads,
                  const std::function<void(std::int64_t, std::int64_t)> &body);

}  // namespace turbo_physai
