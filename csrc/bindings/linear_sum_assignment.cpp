// csrc/bindings/linear_sum_assignment.cpp: nb::ndarray front of the assignment solvers.
//
// The Python op hands checked, freshly allocated outputs; the checks here keep a direct call
// from reading or writing out of bounds. The cost matrix may have any strides (views).
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "bindings.h"
#include "linear_sum_assignment/linear_sum_assignment.h"
#include "quant_arrays.h"
#ifdef TPA_WITH_CUDA
#include <stdexcept>

#include "cuda_device.h"
#include "linear_sum_assignment/linear_sum_assignment_cuda.h"
#endif

namespace turbo_physai::bindings {
namespace {

constexpr const char *kLsapOp = "linear_sum_assignment";

template <class Device>
using LsapCost = nb::ndarray<nb::ndim<2>, Device>;
template <class Device>
using LsapIndex = nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig, Device>;
template <class Device>
using LsapStatusArray = nb::ndarray<std::int32_t, Device>;

/// Checks the outputs against `cost`; true for a float64 cost, false for float32.
template <class Device>
bool check_lsap(const LsapCost<Device> &cost, const LsapIndex<Device> &row_ind,
                const LsapIndex<Device> &col_ind, const LsapStatusArray<Device> &status) {
    const bool f64 = cost.dtype() == nb::dtype<double>();
    quant::require(f64 || cost.dtype() == nb::dtype<float>(), kLsapOp,
                   "cost must be float32 or float64");
    const std::size_t n = std::min(cost.shape(0), cost.shape(1));
    quant::require(row_ind.shape(0) == n && col_ind.shape(0) == n, kLsapOp,
                   "row_ind and col_ind must have min(rows, cols) = " + std::to_string(n) +
                       " elements, got " + std::to_string(row_ind.shape(0)) + " and " +
                       std::to_string(col_ind.shape(0)));
    quant::require(status.size() == 1, kLsapOp,
                   "status must have 1 element, got shape " + quant::shape_of(status));
    return f64;
}

void lsap_cpu(const LsapCost<nb::device::cpu> &cost, const LsapIndex<nb::device::cpu> &row_ind,
              const LsapIndex<nb::device::cpu> &col_ind,
              const LsapStatusArray<nb::device::cpu> &status) {
    const bool f64 = check_lsap(cost, row_ind, col_ind, status);
    const auto rows = static_cast<std::int64_t>(cost.shape(0));
    const auto cols = static_cast<std::int64_t>(cost.shape(1));
    nb::gil_scoped_release released;
    *status.data() =
        f64 ? kernels::linear_sum_assignment_cpu(static_cast<const double *>(cost.data()), rows,
                                                 cols, cost.stride(0), cost.stride(1),
                                                 row_ind.data(), col_ind.data())
            : kernels::linear_sum_assignment_cpu(static_cast<const float *>(cost.data()), rows,
                                                 cols, cost.stride(0), cost.stride(1),
                                                 row_ind.data(), col_ind.data());
}

#ifdef TPA_WITH_CUDA

using LsapWorkspace = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
using CudaCost = LsapCost<nb::device::cuda>;
using CudaIndex = LsapIndex<nb::device::cuda>;
using CudaStatus = LsapStatusArray<nb::device::cuda>;

template <class T>
kernels::LsapCudaArgs<T> lsap_args(const CudaCost &cost, const CudaIndex &row_ind,
                                   const CudaIndex &col_ind, const CudaStatus &status,
                                   const LsapWorkspace &workspace, int threads) {
    kernels::LsapCudaArgs<T> a{};
    a.cost = static_cast<const T *>(cost.data());
    a.rows = static_cast<std::int64_t>(cost.shape(0));
    a.cols = static_cast<std::int64_t>(cost.shape(1));
    a.row_stride = cost.stride(0);
    a.col_stride = cost.stride(1);
    a.batch = 1;
    a.row_ind = row_ind.data();
    a.col_ind = col_ind.data();
    a.status = status.data();
    a.workspace = workspace.data();
    a.threads = threads;
    return a;
}

void lsap_cuda(const CudaCost &cost, const CudaIndex &row_ind, const CudaIndex &col_ind,
               const CudaStatus &status, const LsapWorkspace &workspace, int threads,
               std::uintptr_t stream) {
    const bool f64 = check_lsap(cost, row_ind, col_ind, status);
    quant::require(quant::on_one_device(cost, row_ind, col_ind, status, workspace), kLsapOp,
                   "cost, row_ind, col_ind, status and workspace must be on one CUDA device");
    const std::int64_t bytes = kernels::linear_sum_assignment_cuda_workspace_bytes(
        static_cast<std::int64_t>(cost.shape(0)), static_cast<std::int64_t>(cost.shape(1)));
    quant::require(static_cast<std::int64_t>(workspace.shape(0)) >= bytes &&
                       reinterpret_cast<std::uintptr_t>(workspace.data()) % 256 == 0,
                   kLsapOp,
                   "workspace must be 256-byte aligned with at least " + std::to_string(bytes) +
                       " bytes (linear_sum_assignment_cuda_workspace_bytes), got " +
                       std::to_string(workspace.shape(0)));
    const CudaDeviceGuard on_device(cost.device_id());
    const auto s = reinterpret_cast<cudaStream_t>(stream);
    const cudaError_t err =
        f64 ? kernels::linear_sum_assignment_cuda(
                  lsap_args<double>(cost, row_ind, col_ind, status, workspace, threads), s)
            : kernels::linear_sum_assignment_cuda(
                  lsap_args<float>(cost, row_ind, col_ind, status, workspace, threads), s);
    if (err == cudaErrorInvalidValue)
        throw nb::value_error("linear_sum_assignment: sizes beyond 32-bit indexing, or threads "
                              "not one of 0, 32, 64, 128, 256, 512");
    if (err != cudaSuccess)
        throw std::runtime_error(std::string(kLsapOp) + ": CUDA launch failed: " +
                                 cudaGetErrorString(err));
}
#endif

}  // namespace

void bind_linear_sum_assignment(nb::module_ &m) {
    // noconvert: a converted copy of an output would not be written back.
    m.def("linear_sum_assignment_cpu", &lsap_cpu, nb::arg("cost").noconvert(),
          nb::arg("row_ind").noconvert(), nb::arg("col_ind").noconvert(),
          nb::arg("status").noconvert(),
          "scipy.optimize.linear_sum_assignment of a 2-d float32/float64 cost (any strides), "
          "computed in float64: writes the int64 row_ind/col_ind (min(rows, cols) each) and the "
          "int32 status (0 ok, 1 NaN or -inf entries, 2 infeasible).");
#ifdef TPA_WITH_CUDA
    m.def("linear_sum_assignment_cuda", &lsap_cuda, nb::arg("cost").noconvert(),
          nb::arg("row_ind").noconvert(), nb::arg("col_ind").noconvert(),
          nb::arg("status").noconvert(), nb::arg("workspace").noconvert(), nb::arg("threads"),
          nb::arg("stream"),
          "As linear_sum_assignment_cpu on CUDA memory, enqueued on `stream` with a uint8 "
          "workspace of linear_sum_assignment_cuda_workspace_bytes(rows, cols); threads: a "
          "block's (0 picks).");
    m.def("linear_sum_assignment_cuda_workspace_bytes",
          &kernels::linear_sum_assignment_cuda_workspace_bytes, nb::arg("rows"),
          nb::arg("cols"), "Bytes of linear_sum_assignment_cuda's workspace.");
#endif
}

}  // namespace turbo_physai::bindings
