"""LibreYOLO's int8 fake quantization on the C++ / CUDA kernels, as torch custom ops.

Three ops: ``turbo_physai::fake_quant_int8_per_channel(weight, ch_axis, scale)`` (a given
per-channel scale) and ``..._dynamic(weight, ch_axis) -> (out, scale)`` (the scale
``max(amax / 127, 1e-12)`` computed in the same pass) with the backward op
``..._per_channel_backward(grad, weight, scale, ch_axis)``; and
``turbo_physai::fake_quant_int8_affine(x, lo, hi)`` (per-tensor, from a calibrated range) with
``..._affine_backward``. They compute what ``torch.fake_quantize_per_channel_affine`` /
``torch.fake_quantize_per_tensor_affine`` compute on the tensors' device (CPU or CUDA rules:
``csrc/kernels/fake_quant_int8/int8_rounding.h``), and the gradient is torch's: the incoming
gradient times the mask of codes inside [-128, 127] before clamping, recomputed from the input.
The fronts are in :mod:`turbo_physai.ops.quant`.
"""

from __future__ import annotations

import torch

from turbo_physai import _core
from turbo_physai.ops._dlpack import capsules
from turbo_physai.ops._eager import dispatcher_needed, profiled
from turbo_physai.ops._quant_ops import call, define, fast, grad_needed

_PER_CHANNEL = "turbo_physai::fake_quant_int8_per_channel"
_DYNAMIC = "turbo_physai::fake_quant_int8_per_channel_dynamic"
_PER_CHANNEL_BACKWARD = "turbo_physai::fake_quant_int8_per_channel_backward"
_AFFINE = "turbo_physai::fake_quant_int8_affine"
_AFFINE_BACKWARD = "turbo_physai::fake_quant_int8_affine_backward"


# --- kernel functions: allocate, hand DLPack capsules to the binding ---------------------------

def per_channel(weight, ch_axis, scale):
    out = torch.empty_like(weight)
    call("fake_quant_int8_per_channel", weight, *capsules(weight, out, scale), ch_axis, False)
    return out


def per_channel_dynamic(weight, ch_axis):
    out, scale = torch.empty_like(weight), weight.new_empty(weight.shape[ch_axis])
    call("fake_quant_int8_per_channel", weight, *capsules(weight, out, scale), ch_axis, True)
    return out, scale


def per_channel_backward(grad, weight, scale, ch_axis):
    grad, grad_x = grad.contiguous(), torch.empty_like(weight)
    call("fake_quant_int8_per_channel_backward", weight,
         *capsules(grad, weight, scale, grad_x), ch_axis)
    return grad_x


def affine(x, lo, hi):
    out = torch.empty_like(x)
    call("fake_quant_int8_affine", x, *capsules(x, out, lo, hi))
    return out


def affine_backward(grad, x, lo, hi):
    grad, grad_x = grad.contiguous(), torch.empty_like(x)
    call("fake_quant_int8_affine_backward", x, *capsules(grad, x, lo, hi, grad_x))
    return grad_x


# --- the custom ops ---------------------------------------------------------------------------

_CUDA = _core.cuda_kernels
_per_channel_op = define(
    _PER_CHANNEL, "(Tensor weight, int ch_axis, Tensor scale) -> Tensor", per_channel,
    per_channel if _CUDA else None, lambda weight, ch_axis, scale: torch.empty_like(weight))
_dynamic_op = define(
    _DYNAMIC, "(Tensor weight, int ch_axis) -> (Tensor, Tensor)", per_channel_dynamic,
    per_channel_dynamic if _CUDA else None,
    lambda weight, ch_axis: (torch.empty_like(weight), weight.new_empty(weight.shape[ch_axis])))
_per_channel_backward_op = define(
    _PER_CHANNEL_BACKWARD, "(Tensor grad, Tensor weight, Tensor scale, int ch_axis) -> Tensor",
    per_channel_backward, per_channel_backward if _CUDA else None,
    lambda grad, weight, scale, ch_axis: torch.empty_like(weight))
_affine_op = define(_AFFINE, "(Tensor x, Tensor lo, Tensor hi) -> Tensor", affine,
                    affine if _CUDA else None, lambda x, lo, hi: torch.empty_like(x))
_affine_backward_op = define(
    _AFFINE_BACKWARD, "(Tensor grad, Tensor x, Tensor lo, Tensor hi) -> Tensor", affine_backward,
    affine_backward if _CUDA else None, lambda grad, x, lo, hi: torch.empty_like(x))


def _save_per_channel(ctx, inputs, output):
    weight, ch_axis, scale = inputs
    ctx.save_for_backward(weight, scale)
    ctx.ch_axis = ch_axis


def _save_dynamic(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output[1])
    ctx.ch_axis = inputs[1]


def _weight_grad(ctx, grad):
    weight, scale = ctx.saved_tensors
    return _per_channel_backward_op(grad, weight, scale, ctx.ch_axis)


def _per_channel_grad(ctx, grad):
    return _weight_grad(ctx, grad), None, None


def _dynamic_grad(ctx, grad, grad_scale):
    # the scale output is computed from weight.detach() in the reference: no gradient path
    return _weight_grad(ctx, grad), None


def _save_affine(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _affine_grad(ctx, grad):
    return _affine_backward_op(grad, *ctx.saved_tensors), None, None


_per_channel_op.register_autograd(_per_channel_grad, setup_context=_save_per_channel)
_dynamic_op.register_autograd(_dynamic_grad, setup_context=_save_dynamic)
_affine_op.register_autograd(_affine_grad, setup_context=_save_affine)


# --- the eager fast path ------------------------------------------------------------------------

class _PerChannel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, ch_axis, scale):
        if scale is None:
            out, scale = per_channel_dynamic(weight, ch_axis)
        else:
            out = per_channel(weight, ch_axis, scale)
        ctx.save_for_backward(weight, scale)
        ctx.ch_axis = ch_axis
        return out

    @staticmethod
    def backward(ctx, grad):
        weight, scale = ctx.saved_tensors
        if dispatcher_needed():
            return _per_channel_backward_op(grad, weight, scale, ctx.ch_axis), None, None
        return per_channel_backward(grad, weight, scale, ctx.ch_axis), None, None


class _Affine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x, lo, hi)
        return affine(x, lo, hi)

    @staticmethod
    def backward(ctx, grad):
        if dispatcher_needed():
            return _affine_backward_op(grad, *ctx.saved_tensors), None, None
        return affine_backward(grad, *ctx.saved_tensors), None, None


def run_per_channel(weight: torch.Tensor, ch_axis: int,
                    scale: torch.Tensor | None) -> torch.Tensor:
    """The ops, or their kernels directly in plain eager execution; weight contiguous float32,
    scale None or a contiguous float32 (C,) on weight's device, not requiring grad."""
    if fast(weight, scale):
        if grad_needed(weight):
            return profiled(_PER_CHANNEL, _PerChannel.apply, weight, ch_axis, scale)
        if scale is None:
            return profiled(_DYNAMIC, per_channel_dynamic, weight, ch_axis)[0]
        return profiled(_PER_CHANNEL, per_channel, weight, ch_axis, scale)
    if scale is None:
        return _dynamic_op(weight, ch_axis)[0]
    return _per_channel_op(weight, ch_axis, scale)


def run_affine(x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Likewise for the affine op; x contiguous float32, lo and hi one float32 each on x's
    device, not requiring grad."""
    if fast(x, lo, hi):
        if grad_needed(x):
            return profiled(_AFFINE, _Affine.apply, x, lo, hi)
        return profiled(_AFFINE, affine, x, lo, hi)
    return _affine_op(x, lo, hi)
