// csrc/bindings/quant_arrays.h: shapes, layouts and messages the quantization bindings share.
//
// The Python fronts hand these bindings tensors they have already checked and laid out; the
// checks here keep a direct call from reading or writing out of bounds, with messages that
// name the op, the array and what was expected.
#pragma once

#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#ifdef TPA_WITH_CUDA
#include <stdexcept>

#include "cuda_device.h"
#endif

namespace turbo_physai::bindings::quant {

/// The arrays the quantization bindings take: float32 in and out, uint8 payloads.
using CpuIn = nb::ndarray<const float, nb::device::cpu>;
using CpuOut = nb::ndarray<float, nb::device::cpu>;
using CpuPayload = nb::ndarray<const std::uint8_t, nb::device::cpu>;
#ifdef TPA_WITH_CUDA
using CudaIn = nb::ndarray<const float, nb::device::cuda>;
using CudaOut = nb::ndarray<float, nb::device::cuda>;
using CudaPayload = nb::ndarray<const std::uint8_t, nb::device::cuda>;
#endif

template <class Array>
std::string shape_of(const Array &a) {
    std::string s = "(";
    for (std::size_t i = 0; i < a.ndim(); ++i)
        s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

template <class Array>
std::int64_t numel(const Array &a) {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < a.ndim(); ++i)
        n *= static_cast<std::int64_t>(a.shape(i));
    return n;
}

/// C order, extents of 1 taking any stride; an empty array is contiguous whatever its strides.
template <class Array>
bool contiguous(const Array &a) {
    if (numel(a) == 0)
        return true;
    std::int64_t expected = 1;
    for (std::size_t i = a.ndim(); i-- > 0;) {
        if (a.shape(i) != 1 && a.stride(i) != expected)
            return false;
        expected *= static_cast<std::int64_t>(a.shape(i));
    }
    return true;
}

template <class A, class B>
bool same_shape(const A &a, const B &b) {
    if (a.ndim() != b.ndim())
        return false;
    for (std::size_t i = 0; i < a.ndim(); ++i)
        if (a.shape(i) != b.shape(i))
            return false;
    return true;
}

inline void require(bool ok, const char *op, const std::string &what) {
    if (!ok)
        throw nb::value_error((std::string(op) + ": " + what).c_str());
}

template <class Array>
void require_contiguous(const Array &a, const char *op, const char *name) {
    require(contiguous(a), op, std::string(name) + " must be contiguous, got shape " +
                                   shape_of(a));
}

template <class A, class B>
void require_same_shape(const A &a, const char *a_name, const B &b, const char *b_name,
                        const char *op) {
    require(same_shape(a, b), op, std::string(a_name) + " has shape " + shape_of(a) +
                                      ", expected " + b_name + "'s shape " + shape_of(b));
}

template <class Array>
void require_ndim(const Array &a, std::size_t ndim, const char *op, const char *name) {
    require(a.ndim() == ndim, op, std::string(name) + " must be " + std::to_string(ndim) +
                                      "-d, got shape " + shape_of(a));
}

template <class... Arrays>
bool on_one_device(const Arrays &...arrays) {
    const int ids[] = {arrays.device_id()...};
    for (int id : ids)
        if (id != ids[0])
            return false;
    return true;
}

#ifdef TPA_WITH_CUDA
/// Runs `kernel(args, stream)` with the arrays' GPU current, raising on a failed launch.
template <class Args>
void launch(cudaError_t (*kernel)(const Args &, cudaStream_t), const Args &args, int device,
            std::uintptr_t stream, const char *op) {
    const CudaDeviceGuard on_device(device);
    const cudaError_t err = kernel(args, reinterpret_cast<cudaStream_t>(stream));
    if (err != cudaSuccess)
        throw std::runtime_error(std::string(op) + ": CUDA launch failed: " +
                                 cudaGetErrorString(err));
}
#endif

}  // namespace turbo_physai::bindings::quant
