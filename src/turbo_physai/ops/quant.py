"""LibreYOLO's quantization slots on turbo_physai's kernels: one function per slot, same signature.

``libreyolo.kernels`` (1.6.0) has eight fake-quantization slots and two unpack slots, each with a
reference in ``libreyolo.quant.fake_quant`` / ``libreyolo.quant.packing`` that LibreYOLO calls the
numerical oracle. The functions here take exactly those arguments and return the reference's
bits: every non-NaN output bit (signed zeros included) and NaN in the same elements, forward and
gradient, with the reference's output shape and dtype. (Where two different NaNs meet in one
step, which payload survives is not part of the contract: torch's own SIMD body and scalar tail
disagree on it.) Where the reference raises, these raise too. They run our C++ kernels for
float32 tensors on the CPU and on CUDA (where the build has the CUDA kernels), and
:mod:`turbo_physai.ops.quant_reference`, the same torch steps as LibreYOLO's, for everything
else: other dtypes and devices, a scale that needs a gradient, inputs the reference rejects,
``torch.jit.trace`` and ONNX export (where the int8 slots must stay
``torch.fake_quantize_*`` so the exporter writes QuantizeLinear/DequantizeLinear).

Gradients are the reference's: straight-through (the incoming gradient, summed where an input
was broadcast) for fp8 and the grouped ints; torch's clamp mask for the int8 slots (zero where
the code fell outside [-128, 127] before clamping, NaN inputs included); ``(grad * eff) / eff``
per block for the FP4 formats, which autograd computes through LibreYOLO's formulation. Scales,
amaxes and packed payloads get none, as in the reference.
"""

from __future__ import annotations

import torch

from turbo_physai import _core
from turbo_physai.kernels.reference import broadcast_shape
from turbo_physai.ops import fake_quant_fp4 as _fp4
from turbo_physai.ops import fake_quant_fp8 as _fp8
from turbo_physai.ops import fake_quant_int8 as _int8
from turbo_physai.ops import fake_quant_int_grouped as _grouped
from turbo_physai.ops import quant_reference as _reference
from turbo_physai.ops._quant_ops import native, portable_only

__all__ = [
    "fake_quant_fp8",
    "fake_quant_int8_affine",
    "fake_quant_int8_per_channel",
    "fake_quant_int_grouped",
    "fake_quant_mxfp4_dynamic",
    "fake_quant_mxfp4_weight",
    "fake_quant_nvfp4_dynamic",
    "fake_quant_nvfp4_weight",
    "unpack_int_grouped",
    "unpack_nvfp4",
]

_Tensor = torch.Tensor
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fits(t: _Tensor, shape: tuple[int, ...]) -> bool:
    """t broadcasts to `shape` without growing it."""
    return broadcast_shape(t.shape, shape) == tuple(shape)


def _gpu_or_cpu(*tensors) -> bool:
    return native(*tensors, cuda=_core.cuda_kernels)


# --- fp8 ---------------------------------------------------------------------------------------

def fake_quant_fp8(x: _Tensor, scale: _Tensor) -> _Tensor:
    """Symmetric FP8 E4M3 fake quantization with a broadcastable scale: ``x + (q - x)`` with
    ``q = fp8(clamp(x / s, +-448)) * s``, ``s = max(scale, 1e-12)``; the result has the shape x
    and scale broadcast to."""
    if (portable_only() or not _gpu_or_cpu(x, scale)
            or broadcast_shape(x.shape, scale.shape) is None):  # the reference raises there
        return _reference.fake_quant_fp8(x, scale)
    if scale.requires_grad:
        scale = scale.detach()  # the reference's quantized term is detached
    if scale.dim() == 1 and scale.numel() != 1 and x.dim() >= 2:
        # torch broadcasts a 1-D scale along x's last dim; our op would read it per dim 0
        scale = scale.unsqueeze(0)
    return _fp8.run(x, scale, True)


# --- int8 --------------------------------------------------------------------------------------

def fake_quant_int8_per_channel(weight: _Tensor, ch_axis: int = 0,
                                scale: _Tensor | None = None) -> _Tensor:
    """``torch.fake_quantize_per_channel_affine`` over [-128, 127], zero point 0, with the given
    per-channel scale or ``max(amax / 127, 1e-12)`` of each channel along ``ch_axis``."""
    if portable_only() or not _int8_per_channel_native(weight, ch_axis, scale):
        return _reference.fake_quant_int8_per_channel(weight, ch_axis, scale)
    if scale is not None:
        scale = scale.to(device=weight.device, dtype=torch.float32).contiguous()
    return _int8.run_per_channel(weight.contiguous(), ch_axis, scale)


def _int8_per_channel_native(weight, ch_axis, scale) -> bool:
    if not (_gpu_or_cpu(weight) and _integer(ch_axis) and 0 <= ch_axis < weight.dim()
            and weight.shape[ch_axis] > 0):
        return False
    if scale is None:
        return weight.numel() > 0  # the reference's amax raises on an empty reduction
    return (isinstance(scale, _Tensor) and scale.dtype in _FLOATS and not scale.requires_grad
            and scale.device.type in ("cpu", "cuda") and scale.dim() == 1
            and scale.shape[0] == weight.shape[ch_axis])


def fake_quant_int8_affine(x: _Tensor, lo: _Tensor, hi: _Tensor, scalars: bool = False) -> _Tensor:
    """``torch.fake_quantize_per_tensor_affine`` over [-128, 127] with the scale and zero point
    LibreYOLO derives from a calibrated [lo, hi] (widened to contain 0). ``scalars=True`` (its
    ONNX export mode) refuses a zero point outside the range, which a NaN bound gives."""
    if portable_only() or not (_gpu_or_cpu(x, lo, hi) and lo.numel() == 1 and hi.numel() == 1):
        if (not scalars and isinstance(x, _Tensor) and x.is_cuda
                and any(isinstance(t, _Tensor) and t.device != x.device for t in (lo, hi))):
            # torch's CUDA kernel would dereference the scale and zero point where they are
            raise ValueError(f"fake_quant_int8_affine: lo and hi must be on x's device "
                             f"({x.device}), got {lo.device} and {hi.device}")
        return _reference.fake_quant_int8_affine(x, lo, hi, scalars)
    if scalars:
        lo, hi = lo.detach(), hi.detach()  # the reference reads them as python numbers
        zero_point = _core.int8_affine_zero_point(float(lo), float(hi), x.is_cuda)
        if not -128 <= zero_point <= 127:
            raise ValueError(f"fake_quant_int8_affine: the zero point of lo={float(lo)}, "
                             f"hi={float(hi)} is {zero_point}, outside [-128, 127] "
                             "(scalars=True, as torch.fake_quantize_per_tensor_affine checks)")
    elif lo.requires_grad or hi.requires_grad:
        return _reference.fake_quant_int8_affine(x, lo, hi, scalars)  # raises as torch's does
    return _int8.run_affine(x.contiguous(), lo.reshape(1), hi.reshape(1))


# --- grouped integers ----------------------------------------------------------------------------

def fake_quant_int_grouped(weight: _Tensor, bits: int, group_size: int,
                           scale: _Tensor | None = None) -> _Tensor:
    """Grouped symmetric integer weights: each run of ``group_size`` input features of a 2-D
    (out, in) weight on ``[-2^(bits-1), 2^(bits-1) - 1]`` with the given (out, groups) scale or
    its own ``amax / (2^(bits-1) - 1)``, straight-through."""
    groups = _int_groups(weight, bits, group_size)
    if portable_only() or groups is None or not (scale is None or (
            _gpu_or_cpu(weight, scale) and _fits(scale, (weight.shape[0], groups)))):
        return _reference.fake_quant_int_grouped(weight, bits, group_size, scale)
    if scale is not None:
        scale = scale.detach().expand(weight.shape[0], groups)
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    return _grouped.run_fake_quant(w, bits, group_size, scale)


def _int_groups(weight, bits, group_size) -> int | None:
    """The number of groups where the kernel takes these arguments, else None."""
    if not (_gpu_or_cpu(weight) and weight.dim() == 2 and weight.numel() > 0 and _integer(bits)
            and 1 <= bits <= 16 and _integer(group_size) and group_size > 0):
        return None
    return -(-weight.shape[1] // group_size)


def unpack_int_grouped(payload: _Tensor, scale: _Tensor, bits: int, group_size: int,
                       in_features: int) -> _Tensor:
    """Dequantize a grouped W4/W2 checkpoint: codes (lowest bits first) minus 2^(bits-1), times
    the group's ``max(scale, 1e-12)``; the first ``in_features`` columns (slice semantics)."""
    cols = _payload_codes(payload, bits)
    if (portable_only() or cols is None or not _integer(group_size) or group_size <= 0
            or cols % group_size or not _integer(in_features)
            or not _stored_scale(scale, payload, (payload.shape[0], cols // group_size))):
        return _reference.unpack_int_grouped(payload, scale, bits, group_size, in_features)
    width = len(range(cols)[:in_features])
    s = scale.float().expand(payload.shape[0], cols // group_size)[:, :-(-width // group_size)]
    return _grouped.run_unpack(payload, s, bits, group_size, width)


def _payload_codes(payload, bits) -> int | None:
    """Codes a row of a uint8 (out, bytes) payload holds, where the kernels take it."""
    if not (isinstance(payload, _Tensor) and type(bits) is int and bits in (2, 4)
            and payload.dtype is torch.uint8 and payload.dim() == 2 and payload.numel() > 0
            and (payload.is_cpu or (payload.is_cuda and _core.cuda_kernels))):
        return None
    return payload.shape[1] * (8 // bits)


def _stored_scale(t, payload: _Tensor, shape: tuple[int, ...] | None) -> bool:
    """A float tensor (float8 included) of scales on payload's device, which the kernels read as
    float32: broadcasting to `shape` without growing it, or one element where shape is None."""
    return (isinstance(t, _Tensor) and t.device == payload.device and not t.requires_grad
            and t.is_floating_point() and (t.numel() == 1 if shape is None else _fits(t, shape)))


# --- FP4 -----------------------------------------------------------------------------------------

def _fp4_native(x) -> bool:
    return _gpu_or_cpu(x) and x.dim() >= 1


def fake_quant_mxfp4_weight(weight: _Tensor) -> _Tensor:
    """OCP MXFP4: E2M1 elements in 32-element blocks along the last dim, power-of-two block
    scales ``2^(floor(log2(amax)) - 2)``."""
    if portable_only() or not _fp4_native(weight):
        return _reference.fake_quant_mxfp4_weight(weight)
    return _fp4.run_fake_quant(weight, "mx", None)


def fake_quant_mxfp4_dynamic(x: _Tensor) -> _Tensor:
    """MXFP4 of activations (the same arithmetic as :func:`fake_quant_mxfp4_weight`)."""
    if portable_only() or not _fp4_native(x):
        return _reference.fake_quant_mxfp4_dynamic(x)
    return _fp4.run_fake_quant(x, "mx", None)


def fake_quant_nvfp4_weight(weight: _Tensor, tensor_amax: _Tensor) -> _Tensor:
    """NVFP4: E2M1 elements in 16-element blocks along the last dim, each with an E4M3 scale
    times the tensor scale ``max(tensor_amax / 2688, 1e-12)`` of a fixed amax."""
    if (portable_only() or not _fp4_native(weight) or not _gpu_or_cpu(weight, tensor_amax)
            or tensor_amax.numel() != 1 or tensor_amax.requires_grad):
        return _reference.fake_quant_nvfp4_weight(weight, tensor_amax)
    return _fp4.run_fake_quant(weight, "nv", tensor_amax.reshape(1))


def fake_quant_nvfp4_dynamic(x: _Tensor) -> _Tensor:
    """NVFP4 of activations, the tensor amax taken from x (NaN if x has a NaN)."""
    if portable_only() or not _fp4_native(x) or x.numel() == 0:
        return _reference.fake_quant_nvfp4_dynamic(x)
    return _fp4.run_fake_quant(x, "nv", None)


def unpack_nvfp4(payload: _Tensor, block_scale: _Tensor, tensor_amax: _Tensor,
                 in_features: int) -> _Tensor:
    """Dequantize an NVFP4 checkpoint: E2M1 codes (low nibble first) times each 16-code block's
    ``max(block_scale * max(tensor_amax / 2688, 1e-12), 1e-12)``; the first ``in_features``
    columns (slice semantics)."""
    cols = _payload_codes(payload, 4)
    if (portable_only() or cols is None or cols % 16 or not _integer(in_features)
            or not _stored_scale(block_scale, payload, (payload.shape[0], cols // 16))
            or not _stored_scale(tensor_amax, payload, None)):
        return _reference.unpack_nvfp4(payload, block_scale, tensor_amax, in_features)
    width = len(range(cols)[:in_features])
    s = block_scale.float().expand(payload.shape[0], cols // 16)[:, :-(-width // 16)]
    return _fp4.run_unpack(payload, s, tensor_amax.float().reshape(1), width)
