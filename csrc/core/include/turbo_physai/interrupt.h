// csrc/core/include/turbo_physai/interrupt.h: a stop request that long kernel calls check.
#pragma once

#include <atomic>
#include <stdexcept>

namespace turbo_physai {

/// Thrown by a kernel that found its stop flag set. Whoever set the flag (a binding that saw
/// Ctrl-C) catches it and discards the partly written outputs.
struct Interrupted : std::runtime_error {
    Interrupted() : std::runtime_error("interrupted") {}
};

/// Throws Interrupted if `stop` (null: never) is set. One relaxed load: kernels call it once per
/// chunk of work (a row, a batch of points), so a stop takes effect within microseconds.
inline void stop_point(const std::atomic<bool> *stop) {
    if (stop && stop->load(std::memory_order_relaxed))
        throw Interrupted();
}

}  // namespace turbo_physai
