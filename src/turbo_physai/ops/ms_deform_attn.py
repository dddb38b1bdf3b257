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

Kernel registry hook: the registry (SPEC §5) registers :data:`reference` as the fallback of slot
:data:`SLOT` and :data:`cpu_impl` as the built-in implementation, eligible where
:func:`cpu_eligible` holds. This module does not register anything itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_physai import _core

__all__ = ["SLOT", "cpu_eligible", "cpu_impl", "ms_deform_attn", "ms_deform_attn_reference",
           "reference"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_NATIVE = (torch.float32, torch.float64)


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def check_inputs(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
    """Raise TypeError/ValueError naming the tensor, what was expected and what came.

    Only metadata is read (ranks, sizes, dtypes, devices), so this also runs on fake tensors at
    trace time. The data-dependent checks (level_start_index against spatial_shapes, the level
    areas against S) happen in the kernel front, which raises ValueError as well.
    Returns spatial_shapes and level_start_index as int64.
    """
    named = {"value": value, "spatial_shapes": spatial_shapes,
             "level_start_index": level_start_index, "sampling_locations": sampling_locations,
             "attention_weights": attention_weights}
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    layouts = {"value": (4, "(N, S, M, D)"), "spatial_shapes": (2, "(L, 2)"),
               "level_start_index": (1, "(L,)"), "sampling_locations": (6, "(N, Lq, M, L, P, 2)"),
               "attention_weights": (5, "(N, Lq, M, L, P)")}
    for name, (rank, layout) in layouts.items():
        if named[name].dim() != rank:
            raise ValueError(f"{name}: expected a {rank}-d tensor {layout}, "
                             f"got shape {_shape(named[name])}")
    if value.dtype not in _FLOATS:
        raise TypeError(f"value: expected a floating dtype {_FLOATS}, got {value.dtype}")
    for name in ("sampling_locations", "attention_weights"):
        if named[name].dtype != value.dtype:
            raise TypeError(f"{name}: expected dtype {value.dtype} (the dtype of value), "
                            f"got {named[name].dtype}")
    for name in ("spatial_shapes", "level_start_index"):
        if named[name].dtype.is_floating_point or named[name].dtype.is_complex \
                or named[name].dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer dtype (int64), got {named[name].dtype}")
    for name, t in named.items():
        if t.device != value.device:
            raise ValueError(f"{name}: expected device {value.device} (the device of value), "
                             f"got {t.device}")

    n, _, m, _ = value.shape
    levels = spatial_shapes.shape[0]
    lq, points = sampling_locations.shape[1], sampling_locations.shape[4]
    expected = {"spatial_shapes": (levels, 2), "level_start_index": (levels,),
                "sampling_locations": (n, lq, m, levels, points, 2),
                "attention_weights": (n, lq, m, levels, points)}
    sources = {"spatial_shapes": "L rows of (H, W)", "level_start_index": "L of spatial_shapes",
               "sampling_locations": "N, M of value, L of spatial_shapes",
               "attention_weights": "N, M of value, Lq, L, P of sampling_locations"}
    for name, shape in expected.items():
        if _shape(named[name]) != shape:
            raise ValueError(f"{name}: expected shape {shape} ({sources[name]}), "
                             f"got {_shape(named[name])}")
    return spatial_shapes.to(torch.int64), level_start_index.to(torch.int64)


def _check_grad_output(grad_output, value, sampling_locations):
    n, _, m, d = value.shape
    expected = (n, sampling_locations.shape[1], m * d)
    if tuple(grad_output.shape) != expected:
        raise ValueError(f"grad_output: expected shape {expected} (N, Lq, M*D), "
                         f"got {_shape(grad_output)}")
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


def ms_deform_attn_reference(value: torch.Tensor, spatial_shapes: torch.Tensor,
                             level_start_index: torch.Tensor, sampling_locations: torch.Tensor,
                             attention_weights: torch.Tensor) -> torch.Tensor:
    """The portable formulation, one ``grid_sample`` per level (what transformers runs on CPU).

    level_start_index is implied by spatial_shapes and accepted for a uniform signature.
    """
    n, _, m, d = value.shape
    _, lq, _, levels, points, _ = sampling_locations.shape
    shapes = [(int(h), int(w)) for h, w in spatial_shapes.tolist()]
    value_list = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * sampling_locations - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        # (N, H*W, M, D) -> (N*M, D, H, W); grid (N, Lq, M, P, 2) -> (N*M, Lq, P, 2)
        value_l = value_list[level].flatten(2).transpose(1, 2).reshape(n * m, d, h, w)
        grid_l = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(value_l, grid_l, mode="bilinear", padding_mode="zeros",
                                     align_corners=False))
    weights = attention_weights.transpose(1, 2).reshape(n * m, 1, lq, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1).view(n, m * d, lq)
    return out.transpose(1, 2).contiguous()


def cpu_eligible(value: torch.Tensor, *args, **kwargs) -> bool:
    """Whether :data:`cpu_impl` takes this call: CPU tensors (any floating dtype)."""
    return value.device.type == "cpu"


SLOT = "ms_deform_attn"
reference = ms_deform_attn_reference
cpu_impl = ms_deform_attn
