// csrc/bindings/tensor_view.cpp: reads device, dtype, rank and contiguity of tensors natively.
#include "tensor_view.h"

#include <nanobind/ndarray.h>

#include <string>
#include <utility>
#include <vector>

namespace turbo_physai::bindings {
namespace {

// Interned once; the process keeps them (module state outlives every call).
PyObject *name(const char *s) {
    PyObject *n = PyUnicode_InternFromString(s);
    if (!n)
        throw nb::python_error();
    return n;
}

// Caches keyed by type / dtype object. Types and torch/numpy dtype objects are long-lived
// singletons; the caches hold a strong reference so a pointer can never be reused.
template <class Value>
struct PointerCache {
    std::vector<std::pair<PyObject *, Value>> items;
    const Value *find(PyObject *key) const {
        for (const auto &kv : items)
            if (kv.first == key)
                return &kv.second;
        return nullptr;
    }
    const Value &add(PyObject *key, Value value) {
        Py_INCREF(key);
        items.emplace_back(key, value);
        return items.back().second;
    }
};

bool type_has(PyTypeObject *type, const char *attr) {
    return PyObject_HasAttrString(reinterpret_cast<PyObject *>(type), attr) == 1;
}

bool truthy_attr(PyObject *obj, PyObject *attr) {
    nb::object value = nb::steal(PyObject_GetAttr(obj, attr));
    if (!value.is_valid())
        throw nb::python_error();
    return value.ptr() == Py_True;
}

DType dtype_from_code(nb::dlpack::dtype t) {
    using C = nb::dlpack::dtype_code;
    switch (static_cast<C>(t.code)) {
    case C::Float:
        return t.bits == 16 ? DType::float16 : t.bits == 32 ? DType::float32
               : t.bits == 64 ? DType::float64 : DType::other;
    case C::Bfloat:
        return t.bits == 16 ? DType::bfloat16 : DType::other;
    case C::Int:
        return t.bits == 8 ? DType::int8 : t.bits == 16 ? DType::int16
               : t.bits == 32 ? DType::int32 : t.bits == 64 ? DType::int64 : DType::other;
    case C::UInt:
        return t.bits == 8 ? DType::uint8 : DType::other;
    case C::Bool:
        return DType::bool_;
    case C::Complex:
        return t.bits == 64 ? DType::complex64 : t.bits == 128 ? DType::complex128 : DType::other;
    case C::Float8_E4M3FN:
        return DType::float8_e4m3fn;
    case C::Float8_E5M2:
        return DType::float8_e5m2;
    default:
        return DType::other;
    }
}

Device device_from_code(int code) {
    switch (code) {
    case 1: return Device::cpu;   // kDLCPU
    case 2: return Device::cuda;  // kDLCUDA
    case 8: return Device::mps;   // kDLMetal
    case 14: return Device::xpu;  // kDLOneAPI
    default: return Device::other;
    }
}

}  // namespace

TensorKind tensor_kind(PyObject *obj) {
    static PointerCache<TensorKind> kinds;
    PyTypeObject *type = Py_TYPE(obj);
    if (obj == Py_None || PyLong_CheckExact(obj) || PyFloat_CheckExact(obj) ||
        PyUnicode_CheckExact(obj) || PyBool_Check(obj))
        return TensorKind::none;
    if (const TensorKind *k = kinds.find(reinterpret_cast<PyObject *>(type)))
        return *k;
    TensorKind kind = TensorKind::none;
    if (type_has(type, "is_contiguous") && type_has(type, "is_cuda") && type_has(type, "ndim") &&
        type_has(type, "dtype"))
        kind = TensorKind::attributes;
    else if (type_has(type, "__dlpack__"))
        kind = TensorKind::dlpack;
    return kinds.add(reinterpret_cast<PyObject *>(type), kind);
}

Device TensorView::device() {
    if (device_ < 0) {
        if (kind_ == TensorKind::dlpack) {
            import_dlpack();
        } else {
            // is_cpu first: it is the common answer on most machines, and each probe is a call.
            static PyObject *const probes[] = {name("is_cpu"), name("is_cuda"), name("is_meta"),
                                               name("is_mps"), name("is_xpu")};
            static const Device answers[] = {Device::cpu, Device::cuda, Device::meta, Device::mps,
                                             Device::xpu};
            device_ = static_cast<int>(Device::other);
            for (int i = 0; i < 5; ++i) {
                if (truthy_attr(obj_, probes[i])) {
                    device_ = static_cast<int>(answers[i]);
                    break;
                }
            }
        }
    }
    return static_cast<Device>(device_);
}

DType TensorView::dtype() {
    if (dtype_ < 0) {
        if (kind_ == TensorKind::dlpack) {
            import_dlpack();
        } else {
            static PyObject *const attr = name("dtype");
            static PointerCache<DType> dtypes;
            nb::object dt = nb::steal(PyObject_GetAttr(obj_, attr));
            if (!dt.is_valid())
                throw nb::python_error();
            const DType *known = dtypes.find(dt.ptr());
            if (!known) {
                // "torch.float32" -> "float32"; numpy-style dtypes print bare names.
                std::string text = nb::str(dt).c_str();
                if (text.rfind("torch.", 0) == 0)
                    text = text.substr(6);
                DType parsed = DType::other;
                try {
                    parsed = dtype_from_name(text);
                } catch (const std::invalid_argument &) {
                }
                known = &dtypes.add(dt.ptr(), parsed);
            }
            dtype_ = static_cast<int>(*known);
        }
    }
    return static_cast<DType>(dtype_);
}

int TensorView::rank() {
    if (rank_ < 0) {
        if (kind_ == TensorKind::dlpack) {
            import_dlpack();
        } else {
            static PyObject *const attr = name("ndim");
            nb::object n = nb::steal(PyObject_GetAttr(obj_, attr));
            if (!n.is_valid())
                throw nb::python_error();
            rank_ = static_cast<int>(PyLong_AsLong(n.ptr()));
            if (rank_ < 0 && PyErr_Occurred())
                throw nb::python_error();
        }
    }
    return rank_;
}

bool TensorView::contiguous() {
    if (contiguous_ < 0) {
        if (kind_ == TensorKind::dlpack) {
            import_dlpack();
        } else {
            static PyObject *const method = name("is_contiguous");
            nb::object r = nb::steal(PyObject_CallMethodNoArgs(obj_, method));
            if (!r.is_valid())
                throw nb::python_error();
            contiguous_ = r.ptr() == Py_True;
        }
    }
    return contiguous_ == 1;
}

void TensorView::import_dlpack() {
    nb::ndarray<nb::ro> array;
    if (!nb::try_cast(nb::handle(obj_), array, false)) {
        PyErr_Format(PyExc_TypeError,
                     "turbo_physai.kernels: an argument of type '%s' has __dlpack__ but could not "
                     "be imported through DLPack to check an implementation's requirements",
                     Py_TYPE(obj_)->tp_name);
        throw nb::python_error();
    }
    device_ = static_cast<int>(device_from_code(array.device_type()));
    dtype_ = static_cast<int>(dtype_from_code(array.dtype()));
    rank_ = static_cast<int>(array.ndim());
    // C order; extents of 1 may carry any stride (torch and numpy agree on that rule).
    std::int64_t expected = 1;
    contiguous_ = 1;
    for (int i = rank_ - 1; i >= 0; --i) {
        if (array.shape(i) != 1 && array.stride(i) != expected)
            contiguous_ = 0;
        expected *= static_cast<std::int64_t>(array.shape(i));
    }
}

}  // namespace turbo_physai::bindings
