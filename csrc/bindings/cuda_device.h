// csrc/bindings/cuda_device.h: CUDA launches on the device that holds their arrays.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace turbo_physai::bindings {

/// Makes `device` the calling thread's current CUDA device for the guard's lifetime and restores
/// the previous one after. torch does not switch devices for a tensor on another GPU (cuda:1
/// while cuda:0 is current), and the CUDA Programming Guide says a launch into a stream of a
/// device that is not current fails (CUDA 13 on H200s ran it anyway); device queries such as the
/// SM count also read the current device. No switch (a driver call) when `device` is current.
class CudaDeviceGuard {
public:
    explicit CudaDeviceGuard(int device) {
        check(cudaGetDevice(&previous_));
        if (previous_ != device) {
            check(cudaSetDevice(device));
            switched_ = true;
        }
    }
    ~CudaDeviceGuard() {
        if (switched_)
            cudaSetDevice(previous_);  // a destructor cannot report; the launch already did
    }
    CudaDeviceGuard(const CudaDeviceGuard &) = delete;
    CudaDeviceGuard &operator=(const CudaDeviceGuard &) = delete;

private:
    static void check(cudaError_t err) {
        if (err != cudaSuccess)
            throw std::runtime_error(std::string("selecting the arrays' CUDA device: ") +
                                     cudaGetErrorString(err));
    }

    int previous_ = 0;
    bool switched_ = false;
};

}  // namespace turbo_physai::bindings
