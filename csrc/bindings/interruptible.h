// csrc/bindings/interruptible.h: kernel calls that release the GIL and that Ctrl-C still stops.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "bindings.h"
#include "turbo_physai/interrupt.h"

namespace turbo_physai::bindings {

/// Work (multiply-adds and elements written) from which a call is polled for signals: about
/// 0.4 s of one core (the forward runs about 10^10 a second on one AVX-512 core of the dev box).
/// Smaller calls run on the caller's thread as before and end within the second a Ctrl-C may
/// wait. Why not every call: the helper thread gets an OpenMP team of its own, created for it
/// (threads started per call) and competing with the spinning workers of torch's team, which
/// parallel_for otherwise shares (parallel.cpp); on calls this long that costs well under 1%.
constexpr double kPolledWork = 4294967296.0;  // 2^32

/// How often the caller looks for a signal while a polled call runs.
constexpr std::chrono::milliseconds kPollInterval{50};

/// Runs `work()` with the GIL released; the kernel it calls checks `stop` (stop_point). Python
/// runs signal handlers only on the main thread and only with the GIL, so from kPolledWork on the
/// work runs on a helper thread while the caller polls PyErr_CheckSignals every kPollInterval: when
/// a handler raises (KeyboardInterrupt on Ctrl-C), `stop` is set, the kernel throws Interrupted at
/// its next check (microseconds), the helper is joined and the handler's exception propagates.
/// Other exceptions of `work` propagate as they are.
template <typename Work>
void run_interruptible(double work_amount, std::atomic<bool> &stop, Work &&work) {
    if (work_amount < kPolledWork) {
        nb::gil_scoped_release release;
        work();
        return;
    }
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    std::exception_ptr error;
    PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
    {
        nb::gil_scoped_release release;
        std::thread helper([&] {
            try {
                work();
            } catch (...) {
                error = std::current_exception();
            }
            std::lock_guard<std::mutex> lock(mutex);
            done = true;
            finished.notify_one();
        });
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mutex);
                if (finished.wait_for(lock, kPollInterval, [&] { return done; }))
                    break;
            }
            nb::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() != 0) {
                PyErr_Fetch(&type, &value, &traceback);
                stop.store(true, std::memory_order_relaxed);
                break;
            }
        }
        helper.join();
    }
    if (type) {  // the work's own outcome (Interrupted, most likely) no longer matters
        PyErr_Restore(type, value, traceback);
        throw nb::python_error();
    }
    if (error)
        std::rethrow_exception(error);
}

}  // namespace turbo_physai::bindings
