"""LibreYOLO's FP4 fake quantization (MXFP4, NVFP4) and NVFP4 unpack on the C++ kernels.

``turbo_physai::fake_quant_fp4(x, format, tensor_amax) -> (out, block_scales)`` quantizes a
float32 tensor along its last dim in blocks (format ``"mx"``: 32 elements, power-of-two scales;
``"nv"``: 16 elements, an E4M3 scale times ``max(tensor_amax / 2688, 1e-12)``, with
``tensor_amax`` None taking max |x|). Its gradient is autograd's through LibreYOLO's formulation,
``(grad * eff) / eff`` with each block's effective scale eff (``..._fp4_backward``): not exactly
the incoming gradient where that product rounds. ``turbo_physai::unpack_nvfp4`` dequantizes a
packed checkpoint (no gradient). CPU and CUDA kernels, each with its device's torch rounding;
the fronts are in :mod:`turbo_physai.ops.quant`.
"""

from __future__ import annotations

import math

import torch

from turbo_physai import _core
from turbo_physai.ops._dlpack import capsules
from turbo_physai.ops._eager import dispatcher_needed, profiled
from turbo_physai.ops._quant_ops import call, define, fast, grad_needed

_FAKE_QUANT = "turbo_physai::fake_quant_fp4"
_BACKWARD = "turbo_physai::fake_quant_fp4_backward"
_UNPACK = "turbo_physai::unpack_nvfp4"
BLOCKS = {"mx": 32, "nv": 16}


def _block_scales_like(x: torch.Tensor, format: str) -> torch.Tensor:
    return x.new_empty((math.prod(x.shape[:-1]), -(-x.shape[-1] // BLOCKS[format])))


def fake_quant(x, format, tensor_amax):
    x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]).contiguous()
    out = torch.empty_like(x2)
    scales = _block_scales_like(x, format)
    if x.is_cuda:  # one zeroed float the NV dynamic amax is reduced into
        scratch = x2.new_zeros(1) if tensor_amax is None else x2.new_empty(1)
        call("fake_quant_fp4", x, *capsules(x2, out, scales), format,
             *capsules(tensor_amax, scratch))
    else:
        call("fake_quant_fp4", x, *capsules(x2, out, scales), format, *capsules(tensor_amax))
    return out.view(x.shape), scales


def backward(grad, block_scales, block):
    shape = grad.shape
    grad = grad.reshape(math.prod(shape[:-1]), shape[-1]).contiguous()
    grad_x = torch.empty_like(grad)
    call("fake_quant_fp4_backward", grad, *capsules(grad, block_scales, grad_x), block)
    return grad_x.view(shape)


def unpack(payload, block_scale, tensor_amax, width):
    out = block_scale.new_empty((payload.shape[0], width))
    call("unpack_nvfp4", payload, *capsules(payload, block_scale, tensor_amax, out))
    return out


def _fake(x, format, tensor_amax):
    return x.new_empty(x.shape), _block_scales_like(x, format)


_fake_quant_op = define(_FAKE_QUANT,
                        "(Tensor x, str format, Tensor? tensor_amax) -> (Tensor, Tensor)",
                        fake_quant, fake_quant if _core.cuda_kernels else None, _fake)
_backward_op = define(_BACKWARD, "(Tensor grad, Tensor block_scales, int block) -> Tensor",
                      backward, backward if _core.cuda_kernels else None,
                      lambda grad, block_scales, block: grad.new_empty(grad.shape))
_unpack_op = define(
    _UNPACK, "(Tensor payload, Tensor block_scale, Tensor tensor_amax, int width) -> Tensor",
    unpack, None,
    lambda payload, block_scale, tensor_amax, width: block_scale.new_empty(
        (payload.shape[0], width)))


def _save(ctx, inputs, output):
    ctx.save_for_backward(output[1])
    ctx.block = BLOCKS[inputs[1]]


def _grad(ctx, grad, grad_scales):
    (scales,) = ctx.saved_tensors
    return _backward_op(grad, scales, ctx.block), None, None


_fake_quant_op.register_autograd(_grad, setup_context=_save)


class _FakeQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, format, tensor_amax):
        out, scales = fake_quant(x, format, tensor_amax)
        ctx.save_for_backward(scales)
        ctx.block = BLOCKS[format]
        return out

    @staticmethod
    def backward(ctx, grad):
        (scales,) = ctx.saved_tensors
        if dispatcher_needed():
            return _backward_op(grad, scales, ctx.block), None, None
        return backward(grad, scales, ctx.block), None, None


def run_fake_quant(x: torch.Tensor, format: str, tensor_amax: torch.Tensor | None) -> torch.Tensor:
    """The op, or its kernel directly in plain eager execution; x float32 with at least one dim
    on the CPU (or CUDA), tensor_amax None or one float32 on x's device, needing no gradient."""
    if fast(x, tensor_amax):
        if grad_needed(x):
            return profiled(_FAKE_QUANT, _FakeQuant.apply, x, format, tensor_amax)
        return profiled(_FAKE_QUANT, fake_quant, x, format, tensor_amax)[0]
    return _fake_quant_op(x, format, tensor_amax)[0]


def run_unpack(payload: torch.Tensor, block_scale: torch.Tensor, tensor_amax: torch.Tensor,
               width: int) -> torch.Tensor:
    """Likewise for the unpack op; payload 2-D uint8, block_scale float32 (out, blocks of
    width), tensor_amax one float32, all on one device."""
    if fast(payload, block_scale, tensor_amax):
        return profiled(_UNPACK, unpack, payload, block_scale, tensor_amax, width)
    return _unpack_op(payload, block_scale, tensor_amax, width)
