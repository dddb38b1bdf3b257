// csrc/core/src/parallel.cpp: parallel_for on the process's OpenMP team if one is loaded, else a pool.
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
#include <dlfcn.h>
#include <unistd.h>
#define TPA_GETPID getpid
#endif

namespace turbo_physai {
namespace {

using Body = std::function<void(std::int64_t, std::int64_t)>;

// Set while a thread runs chunks, so that a nested parallel_for runs inline: re-entering the pool
// from inside would wait for workers that are busy running the outer call.
thread_local bool inside_job = false;

/// One parallel_for call: chunks handed out by an atomic counter, first exception kept.
struct Job {
    const Body *body;
    std::int64_t n, grain;
    std::atomic<std::int64_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr error;

    void drain() {
        inside_job = true;
        for (;;) {
            const std::int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
            if (begin >= n)
                break;
            try {
                (*body)(begin, std::min(n, begin + grain));
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error)
                    error = std::current_exception();
                next.store(n, std::memory_order_relaxed);  // hand out no further chunks
            }
        }
        inside_job = false;
    }
};

// torch runs its intra-op work on libgomp's thread team, and those threads keep spinning for a
// while after every torch op. A second pool of ours then fights them for the cores: measured on the
// 2-core dev box, a backward that follows a matmul took 5.4 ms instead of 3.2 ms. So when libgomp
// is already loaded (torch loaded it), chunks run on its team through its stable entry point
// GOMP_parallel (what `#pragma omp parallel` compiles to), without linking against OpenMP: a
// process without torch never loads it and uses the pool below.
using GompParallel = void (*)(void (*)(void *), void *, unsigned, unsigned);

GompParallel loaded_openmp() {
#if defined(__linux__)
    static std::atomic<GompParallel> found{nullptr};
    GompParallel fn = found.load(std::memory_order_acquire);
    if (!fn) {
        // RTLD_NOLOAD: only a library that is already loaded; never loads one itself.
        if (void *lib = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD)) {
            fn = reinterpret_cast<GompParallel>(dlsym(lib, "GOMP_parallel"));
            found.store(fn, std::memory_order_release);
        }
    }
    return fn;
#else
    return nullptr;
#endif
}

/// Our own workers, for processes without an OpenMP runtime (the C++ tests, torch-free use).
class Pool {
public:
    explicit Pool(int workers) {
        for (int i = 0; i < workers; ++i)
            threads_.emplace_back([this, i] { work(i); });
    }

    int workers() const { return static_cast<int>(threads_.size()); }
    std::mutex &submit_mutex() { return submit_; }

    /// Runs the job with `helpers` workers plus the calling thread.
    void run(Job &job, int helpers) {
        {
            std::lock_guard<std::mutex> lock(state_);
            job_ = &job;
            helpers_ = helpers;
            pending_ = helpers;
            ++generation_;
        }
        wake_.notify_all();
        job.drain();
        std::unique_lock<std::mutex> lock(state_);
        done_.wait(lock, [this] { return pending_ == 0; });
    }

private:
    void work(int index) {
        std::uint64_t seen = 0;
        for (;;) {
            Job *job;
            {
                std::unique_lock<std::mutex> lock(state_);
                wake_.wait(lock, [&] { return generation_ != seen; });
                seen = generation_;
                if (index >= helpers_)
                    continue;  // not needed for this call
                job = job_;
            }
            job->drain();
            std::lock_guard<std::mutex> lock(state_);
            if (--pending_ == 0)
                done_.notify_one();
        }
    }

    std::vector<std::thread> threads_;
    std::mutex submit_;  // one caller at a time
    std::mutex state_;   // guards everything below
    std::condition_variable wake_, done_;
    Job *job_ = nullptr;
    int helpers_ = 0, pending_ = 0;
    std::uint64_t generation_ = 0;
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
    if (chunks == 1 || threads == 1 || inside_job) {
        body(0, n);
        return;
    }
    Job job{&body, n, grain};
    if (GompParallel omp = loaded_openmp()) {
        const auto team = static_cast<unsigned>(std::min<std::int64_t>(threads, chunks));
        omp([](void *j) { static_cast<Job *>(j)->drain(); }, &job, team, 0);
    } else {
        Pool &p = pool();
        std::unique_lock<std::mutex> submit(p.submit_mutex(), std::try_to_lock);
        if (!submit.owns_lock()) {
            body(0, n);  // another thread holds the pool: running inline beats waiting for it
            return;
        }
        p.run(job, static_cast<int>(std::min<std::int64_t>({threads - 1, p.workers(), chunks - 1})));
    }
    if (job.error)
        std::rethrow_exception(job.error);
}

}  // namespace turbo_physai
