"""LibreYOLO's grouped integer weights (W4/W2 style) on the C++ kernels, as torch custom ops.

``turbo_physai::fake_quant_int_grouped(weight, bits, group_size, scale)`` is LibreYOLO's
``fake_quant_int_grouped`` forward, straight-through sum included, on a 2-D float32 weight with
a (out, groups) scale (strides 0 where it is broadcast) or none (each group's
``amax / (2^(bits-1) - 1)``); its gradient is the incoming one. ``turbo_physai::unpack_int_grouped``
dequantizes a packed checkpoint (no gradient). CPU and CUDA kernels, each with its device's
torch rounding; the fronts are in :mod:`turbo_physai.ops.quant`.
"""

from __future__ import annotations

import torch

from turbo_physai import _core
from turbo_physai.ops._dlpack import capsules
from turbo_physai.ops._eager import profiled
from turbo_physai.ops._quant_ops import call, define, fast, grad_needed

_FAKE_QUANT = "turbo_physai::fake_quant_int_grouped"
_UNPACK = "turbo_physai::unpack_int_grouped"


def fake_quant(weight, bits, group_size, scale):
    out = weight.new_empty(weight.shape)
    call("fake_quant_int_grouped", weight, *capsules(weight, out, scale), bits, group_size)
    return out


def unpack(payload, scale, bits, group_size, width):
    out = scale.new_empty((payload.shape[0], width))
    call("unpack_int_grouped", payload, *capsules(payload, scale, out), bits, group_size)
    return out


_fake_quant_op = define(
    _FAKE_QUANT, "(Tensor weight, int bits, int group_size, Tensor? scale) -> Tensor",
    fake_quant, fake_quant if _core.cuda_kernels else None,
    lambda weight, bits, group_size, scale: weight.new_empty(weight.shape))
_unpack_op = define(
    _UNPACK, "(Tensor payload, Tensor scale, int bits, int group_size, int width) -> Tensor",
    unpack, unpack if _core.cuda_kernels else None,
    lambda payload, scale, bits, group_size, width: scale.new_empty((payload.shape[0], width)))


def _straight_through(ctx, grad):
    return grad, None, None, None


_fake_quant_op.register_autograd(_straight_through)


class _FakeQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, bits, group_size, scale):
        return fake_quant(weight, bits, group_size, scale)

    @staticmethod
    def backward(ctx, grad):
        return _straight_through(ctx, grad)


def run_fake_quant(weight: torch.Tensor, bits: int, group_size: int,
                   scale: torch.Tensor | None) -> torch.Tensor:
    """The op, or its kernel directly in plain eager execution; weight 2-D float32 on the CPU
    (or CUDA), scale None or a float32 (out, groups) view on its device needing no gradient."""
    if fast(weight, scale):
        if grad_needed(weight):
            return profiled(_FAKE_QUANT, _FakeQuant.apply, weight, bits, group_size, scale)
        return profiled(_FAKE_QUANT, fake_quant, weight, bits, group_size, scale)
    return _fake_quant_op(weight, bits, group_size, scale)


def run_unpack(payload: torch.Tensor, scale: torch.Tensor, bits: int, group_size: int,
               width: int) -> torch.Tensor:
    """Likewise for the unpack op; payload 2-D uint8, scale float32 (out, groups of width) on
    payload's device."""
    if fast(payload, scale):
        return profiled(_UNPACK, unpack, payload, scale, bits, group_size, width)
    return _unpack_op(payload, scale, bits, group_size, width)
