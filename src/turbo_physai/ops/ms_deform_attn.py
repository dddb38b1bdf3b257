"""Multi-scale deformable attention (Deformable DETR), SPEC §6: the op, its checks and reference.

Layouts: value ``(N, S, M, D)``, spatial_shapes ``(L, 2)`` integer ``(H, W)``, level_start_index
``(L,)``, sampling_locations ``(N, Lq, M, L, P, 2)`` as ``(x, y)`` in ``[0, 1]``,
attention_weights ``(N, Lq, M, L, P)``; the result is ``(N, Lq, M*D)``. Sampling is bilinear at
``loc * size - 0.5`` with zero padding, exactly ``grid_sample(align_corners=False)``.

Two ``torch.library`` custom ops carry it: ``turbo_physai::ms_deform_attn`` and
``turbo_physai::ms_deform_attn_backward``, each with a fake (shape-only) implementation, the first
with autograd through the second, so both stay whole inside ``torch.compile`` and
``torch.export`` graphs. The CPU kernel is C++ (``csrc/kernels/ms_deform_attn``); on CUDA builds
the CUDA kernels (same folder, ``*.cu``) are registered on the same ops for ``cuda`` tensors and run
on the current stream, allocating only through torch (CUDA-graph capture safe).

Dtypes: on the CPU float32 and float64 run natively; float16 and bfloat16 are converted to float32
here, in Python, computed in float32 and the results cast back. On CUDA float32, float16 and
bfloat16 run natively with float32 accumulation (float64 is CPU only).

Determinism: the CPU backward is always bit-identical run after run and for any thread count, with
or without ``torch.use_deterministic_algorithms`` (each gradient element has one owning thread).
The CUDA forward is always deterministic; the CUDA backward adds value gradients with float
atomics unless ``torch.are_deterministic_algorithms_enabled()``, when it adds them as 64-bit
fixed-point integers (order-independent, so bit-identical run after run) scaled from
``max|grad_output| * sum|attention_weights|``, a bound on any sum.
On CUDA the level metadata (``spatial_shapes``, ``level_start_index``) is not read on the host
(that would synchronize the stream): a level that does not fit inside ``value`` is read as empty
(zeros) instead of raising as on the CPU.

Kernel registry: slot ``ms_deform_attn`` has the ``grid_sample`` formulation
(:func:`turbo_physai.kernels.reference.ms_deform_attn`) as its reference; :func:`register_kernels`
adds this op as the built-in ``cpp`` implementation for CPU tensors.
"""

from __future__ import annotations

import torch

from turbo_physai import _core
from turbo_physai.kernels.reference import check_ms_deform_attn as check_inputs
from turbo_physai.kernels.reference import ms_deform_attn as ms_deform_attn_reference
from turbo_physai.ops._dlpack import capsules

__all__ = ["SLOT", "ms_deform_attn", "ms_deform_attn_reference", "register_kernels"]

SLOT = "ms_deform_attn"

_HAS_CUDA_KERNELS = hasattr(_core, "ms_deform_attn_forward_cuda")


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
        *capsules(_dense_channels(value, dtype), spatial_shapes.detach(),
                  level_start_index.detach(), sampling_locations.detach().to(dtype),
                  attention_weights.detach().to(dtype), out),
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
        *capsules(_dense_channels(value, dtype), spatial_shapes.detach(),
                  level_start_index.detach(), sampling_locations.detach().to(dtype),
                  attention_weights.detach().to(dtype),
                  _dense_channels(grad_output.reshape(n, lq, m, d), dtype), *grads),
        torch.get_num_threads())
    return tuple(g.to(value.dtype) for g in grads)


@_backward_op.register_fake
def _backward_fake(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights):
    _check_grad_output(grad_output, value, sampling_locations)
    return (value.new_empty(value.shape), sampling_locations.new_empty(sampling_locations.shape),
            attention_weights.new_empty(attention_weights.shape))


def _cuda_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                 attention_weights):
    # The CUDA kernels read dense arrays (16-byte loads of channel rows); contiguous() is free
    # for the usual callers, whose tensors already are.
    return (value.detach().contiguous(), spatial_shapes.detach().to(torch.int64).contiguous(),
            level_start_index.detach().to(torch.int64).contiguous(),
            sampling_locations.detach().contiguous(), attention_weights.detach().contiguous())


def _stream(t: torch.Tensor) -> int:
    # The raw handle of the current stream, without building a torch.cuda.Stream object (the
    # call inductor's generated code makes): host time is most of a small call's cost.
    return torch._C._cuda_getCurrentRawStream(t.device.index)


@_forward_op.register_kernel("cuda")
def _forward_cuda(value, spatial_shapes, level_start_index, sampling_locations,
                  attention_weights):
    n, _, m, d = value.shape
    lq = sampling_locations.shape[1]
    out = torch.empty((n, lq, m, d), dtype=value.dtype, device=value.device)
    _core.ms_deform_attn_forward_cuda(
        *capsules(*_cuda_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                                attention_weights), out), _stream(value))
    return out.view(n, lq, m * d)


def _fixed_point_bound(grad_output, attention_weights):
    # max|grad_output| * sum|weights| bounds every grad_value element's sum of terms (each point
    # touches an element through at most one corner, with a bilinear weight <= 1).
    if grad_output.numel() == 0 or attention_weights.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=grad_output.device)
    inf = float("inf")
    return (torch.linalg.vector_norm(grad_output, inf, dtype=torch.float32)
            * torch.linalg.vector_norm(attention_weights, 1, dtype=torch.float32))


@_backward_op.register_kernel("cuda")
def _backward_cuda(grad_output, value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights):
    _check_grad_output(grad_output, value, sampling_locations)
    n, _, m, d = value.shape
    lq = sampling_locations.shape[1]
    grads = tuple(torch.empty(t.shape, dtype=value.dtype, device=value.device)
                  for t in (value, sampling_locations, attention_weights))
    grad_output = grad_output.detach().reshape(n, lq, m, d).contiguous()
    workspace = bound = None
    if torch.are_deterministic_algorithms_enabled():
        workspace = torch.empty(value.shape, dtype=torch.int64, device=value.device)
        bound = _fixed_point_bound(grad_output, attention_weights.detach())
    elif value.dtype != torch.float32:
        workspace = torch.empty(value.shape, dtype=torch.float32, device=value.device)
    _core.ms_deform_attn_backward_cuda(
        *capsules(*_cuda_inputs(value, spatial_shapes, level_start_index, sampling_locations,
                                attention_weights), grad_output, *grads, workspace, bound),
        _stream(value))
    return grads


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
    """Built-in provider hook (turbo_physai.kernels.providers.BUILTIN): the C++ CPU kernel and,
    on CUDA builds with a GPU, the CUDA kernel (float32/float16/bfloat16)."""
    register(SLOT, ms_deform_attn, name="cpp", requires={"device": "cpu", "args": [0, 3, 4]})
    if _HAS_CUDA_KERNELS and torch.cuda.is_available():
        register(SLOT, ms_deform_attn, name="cuda",
                 requires={"device": "cuda", "dtype": ["float32", "float16", "bfloat16"],
                           "args": [0, 3, 4]})
