"""Multi-scale deformable attention (Deformable DETR), SPEC §6: the op, its checks and reference.

Layouts: value ``(N, S, M, D)``, spatial_shapes ``(L, 2)`` integer ``(H, W)``, level_start_index
``(L,)``, sampling_locations ``(N, Lq, M, L, P, 2)`` as ``(x, y)`` in ``[0, 1]``,
attention_weights ``(N, Lq, M, L, P)``; the result is ``(N, Lq, M*D)``. Sampling is bilinear at
``loc * size - 0.5`` with zero padding, exactly ``grid_sample(align_corners=False)``.

Two ``torch.library`` custom ops carry it: ``turbo_physai::ms_deform_attn`` and
``turbo_physai::ms_deform_attn_backward``, each with a fake (shape-only) implementation, the first
with autograd through the second, so both stay whole inside ``torch.compile`` and
``torch.export`` graphs. The CPU kernel is C++ (``csrc/kernels/ms_deform_attn``); a CUDA kernel
registers on the same ops later.

Dtypes: float32 and float64 run natively. float16 and bfloat16 are converted to float32 here, in
Python, computed in float32 and the results cast back: accumulation is float32 at the price of one
float32 copy of the inputs.

Determinism: the CPU backward is always bit-identical run after run and for any thread count, with
or without ``torch.use_deterministic_algorithms`` (each gradient element has one owning thread).

Kernel registry: slot ``ms_deform_attn`` has the ``grid_sample`` formulation
(:func:`turbo_physai.kernels.reference.ms_deform_attn`) as its reference; :func:`register_kernels`
adds this op as the built-in ``cpp`` implementation for CPU tensors.
"""

from __future__ import annotations

import torch

from turbo_physai import _core
from turbo_physai.kernels.reference import check_ms_deform_attn as check_inputs
from turbo_physai.kernels.reference import ms_deform_attn as ms_deform_attn_reference

__all__ = ["SLOT", "ms_deform_attn", "ms_deform_attn_reference", "register_kernels"]

SLOT = "ms_deform_attn"

_NATIVE = (torch.float32, torch.float64)


def _check_grad_output(grad_output, value, sampling_locations):
    n, _, m, d = value.shape
    expected = (n, sampling_locations.shape[1], m * d)
    if tuple(grad_output.shape) != expected:
        raise ValueError(f"grad_output: expected shape {expected} (N, Lq, M*D), "
                         f"got {tuple(grad_output.shape)}")
    if grad_output.dtype != value.dtype:
        raise TypeError(f"grad_output: expected dtype {value.dtype} (the dtype of value), "
                        f"got {grad_output.dtype}")


def _dense_channels(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The kernel vectorizes over the last dimension and needs it at stride 1; any other stride is
    # read as is. detach(): DLPack refuses tensors that require grad.
    t = t.detach().to(dtype)
    return t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype not in (torch.float16, torch.bfloat16) else torch.float32


@torch.library.custom_op("turbo_physai::ms_deform_attn", mutates_args=(), device_types="cpu")
def _forward_op(value: torch.Tensor, spatial_shapes: torch.Tensor,
                level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                attention_weights: torch.Tensor) -> torch.Tensor:
    n, _, m, d = value.shape
    lq = sampling_locations.shape[1]
    dtype = _compute_dtype(value.dtype)
    out = torch.empty((n, lq, m, d), dtype=dtype, device=value.device)
    _core.ms_deform_attn_forward(
        _dense_channels(value, dtype), spatial_shapes.detach(), level_start_index.detach(),
        sampling_locations.detach().to(dtype), attention_weights.detach().to(dtype), out,
        torch.get_num_threads())
    return out.view(n, lq, m * d).to(value.dtype)


@_forward_op.register_fake
def _forward_fake(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights):
    check_inputs(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    n, _, m, d = value.shape
    return value.new_empty((n, sampling_locations.shape[1], m * d))


@torch.library.custom_op("turbo_physai::ms_deform_attn_backward", mutates_args=(),
                         device_types="cpu")
def _backward_op(grad_output: torch.Tensor, value: torch.Tensor, spatial_shapes: torch.Tensor,
                 level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                 attention_weights: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_grad_output(grad_output, value, sampling_locations)
    n, _, m, d = value.shape
    lq = sampling_locations.shape[1]
    dtype = _compute_dtype(value.dtype)
    grads = tuple(torch.empty(t.shape, dtype=dtype, device=t.device)
                  for t in (value, sampling_locations, attention_weights))
    _core.ms_deform_attn_backward(
        _dense_channels(value, dtype), spatial_shapes.detach(), level_start_index.detach(),
        sampling_locations.detach().to(dtype), attention_weights.detach().to(dtype),
        _dense_channels(grad_output.reshape(n, lq, m, d), dtype), *grads, torch.get_num_threads())
    return tuple(g.to(value.dtype) for g in grads)


@_backward_op.register_fake
def _backward_fake(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights):
    _check_grad_output(grad_output, value, sampling_locations)
    return (value.new_empty(value.shape), sampling_locations.new_empty(sampling_locations.shape),
            attention_weights.new_empty(attention_weights.shape))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _autograd_backward(ctx, grad_output):
    value, spatial_shapes, level_start_index, sampling_locations, attention_weights = \
        ctx.saved_tensors
    grad_value, grad_loc, grad_attn = _backward_op(
        grad_output, value, spatial_shapes, level_start_index, sampling_locations,
        attention_weights)
    need = ctx.needs_input_grad
    return (grad_value if need[0] else None, None, None, grad_loc if need[3] else None,
            grad_attn if need[4] else None)


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)


def ms_deform_attn(value: torch.Tensor, spatial_shapes: torch.Tensor,
                   level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                   attention_weights: torch.Tensor) -> torch.Tensor:
    """Multi-scale deformable attention, ``(N, Lq, M*D)``; differentiable in value, locations
    and weights. Bad inputs raise TypeError/ValueError naming the tensor. See the module doc."""
    spatial_shapes, level_start_index = check_inputs(
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
    return _forward_op(value, spatial_shapes, level_start_index, sampling_locations,
                       attention_weights)


def register_kernels(register) -> None:
    """Built-in provider hook (turbo_physai.kernels.providers.BUILTIN): the C++ CPU kernel."""
    register(SLOT, ms_deform_attn, name="cpp", requires={"device": "cpu", "args": [0, 3, 4]})
