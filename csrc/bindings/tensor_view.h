// csrc/bindings/tensor_view.h: tensor metadata of a Python object, read lazily for eligibility.
#pragma once

#include "bindings.h"
#include "turbo_physai/kernel_registry.h"

namespace turbo_physai::bindings {

/// How metadata is read from an object's type: torch-style attributes (dtype, ndim,
/// is_contiguous(), is_cpu/is_cuda...: about 30 ns each) or DLPack (`__dlpack__`, any array
/// library, but about 1.7 us for a torch tensor, measured). `none`: not a tensor.
enum class TensorKind { none, attributes, dlpack };

TensorKind tensor_kind(PyObject *obj);

/// The `Tensor` model of Requirements::accepts: each property is read on first use and kept,
/// so an argument checked against several implementations is read once per call. Python
/// errors while reading surface as nb::python_error.
class TensorView {
public:
    TensorView(PyObject *obj, TensorKind kind) : obj_(obj), kind_(kind) {}

    Device device();
    DType dtype();
    int rank();
    bool contiguous();

private:
    void import_dlpack();

    PyObject *obj_;
    TensorKind kind_;
    int device_ = -1, dtype_ = -1, rank_ = -1, contiguous_ = -1;
};

}  // namespace turbo_physai::bindings
