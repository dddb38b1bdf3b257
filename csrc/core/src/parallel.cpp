// csrc/core/src/parallel.cpp: the persistent worker pool behind parallel_for.
#include "turbo_physai/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#if defined(_WIN32)
#include <process.h>
#define TPA_GETPID _getpid
#else
#include <unistd.h>
#define TPA_GETPID getpid
#endif

namespace turbo_physai {
namespace {

using Body = std::function<void(std::int64_t, std::int64_t)>;

// Set while a thread runs chunks, so that a nested parallel_for runs inline: re-entering the pool
// from inside would wait for workers that are busy running the outer call.
thread_local bool inside_pool = false;

class Pool {
public:
    explicit Pool(int workers) {
        for (int i = 0; i < workers; ++i)
            threads_.emplace_back([this, i] { work(i); });
    }

    int workers() const { return static_cast<int>(threads_.size()); }
    std::mutex &submit_mutex() { return submit_; }

    /// Runs body over [0, n) with `helpers` workers plus the calling thread.
    void run(std::int64_t n, std::int64_t grain, int helpers, const Body &body) {
        {
            std::lock_guard<std::mutex> lock(state_);
            body_ = &body;
            n_ = n;
            grain_ = grain;
            next_.store(0, std::memory_order_relaxed);
            helpers_ = helpers;
            pending_ = helpers;
            error_ = nullptr;
            ++generation_;
        }
        wake_.notify_all();
        drain();
        std::unique_lock<std::mutex> lock(state_);
        done_.wait(lock, [this] { return pending_ == 0; });
        std::exception_ptr error = std::exchange(error_, nullptr);
        lock.unlock();
        if (error)
            std::rethrow_exception(error);
    }

private:
    void drain() {
        inside_pool = true;
        for (;;) {
            const std::int64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
            if (begin >= n_)
                break;
            try {
                (*body_)(begin, std::min(n_, begin + grain_));
            } catch (...) {
                std::lock_guard<std::mutex> lock(state_);
                if (!error_)
                    error_ = std::current_exception();
                next_.store(n_, std::memory_order_relaxed);  // hand out no further chunks
            }
        }
        inside_pool = false;
    }

    void work(int index) {
        std::uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(state_);
                wake_.wait(lock, [&] { return generation_ != seen; });
                seen = generation_;
                if (index >= helpers_)
                    continue;  // not needed for this call
            }
            drain();
            std::lock_guard<std::mutex> lock(state_);
            if (--pending_ == 0)
                done_.notify_one();
        }
    }

    std::vector<std::thread> threads_;
    std::mutex submit_;  // one caller at a time
    std::mutex state_;   // guards everything below except next_
    std::condition_variable wake_, done_;
    const Body *body_ = nullptr;
    std::int64_t n_ = 0, grain_ = 1;
    std::atomic<std::int64_t> next_{0};
    int helpers_ = 0, pending_ = 0;
    std::uint64_t generation_ = 0;
    std::exception_ptr error_;
};

// The pool is never destroyed: joining threads from a static destructor at interpreter exit can
// deadlock, and parked threads cost nothing. A forked child (DataLoader workers) inherits the
// object but not its threads, so the child builds its own pool.
Pool &pool() {
    static std::mutex guard;
    static Pool *instance = nullptr;
    static long owner = 0;
    std::lock_guard<std::mutex> lock(guard);
    if (!instance || owner != static_cast<long>(TPA_GETPID())) {
        instance = new Pool(hardware_threads() - 1);
        owner = static_cast<long>(TPA_GETPID());
    }
    return *instance;
}

}  // namespace

int hardware_threads() {
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void parallel_for(std::int64_t n, std::int64_t grain, int max_threads, const Body &body) {
    if (n <= 0)
        return;
    grain = std::max<std::int64_t>(grain, 1);
    const std::int64_t chunks = (n + grain - 1) / grain;
    const int threads = max_threads <= 0 ? hardware_threads() : max_threads;
    if (chunks == 1 || threads == 1 || inside_pool) {
        body(0, n);
        return;
    }
    Pool &p = pool();
    std::unique_lock<std::mutex> submit(p.submit_mutex(), std::try_to_lock);
    if (!submit.owns_lock()) {
        body(0, n);  // another thread holds the pool: running inline beats waiting for it
        return;
    }
    const std::int64_t helpers = std::min<std::int64_t>({threads - 1, p.workers(), chunks - 1});
    p.run(n, grain, static_cast<int>(helpers), body);
}

}  // namespace turbo_physai
