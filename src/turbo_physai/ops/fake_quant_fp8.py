"""``torch.ops.turbo_physai.fake_quant_fp8``: the C++ CPU / CUDA kernels as a torch custom op.

``fake_quant_fp8(x, scale, straight_through=False)`` computes ``q = fp8_e4m3fn(clamp(x / s,
+-448)) * s`` with ``s = max(scale, 1e-12)``. The scale is per-tensor (one element), per-channel
along dim 0 (a 1-D scale as long as x's dim 0: our slot's convention) or any shape that
broadcasts against x; the result has the shape x and scale broadcast to (a 0-d x with a (1,)
scale gives (1,), as the slot's reference does). ``straight_through`` returns LibreYOLO's
forward ``x + (q - x)`` instead of q: in float32 the two differ where q is far from x (saturated,
or rounded to zero: 39% of the elements of a 12-decade spread), and LibreYOLO's slot
(:func:`turbo_physai.ops.quant.fake_quant_fp8`) needs its bits. The gradient is straight-through
to x (summed over the dims x was broadcast along), none to the scale.

A ``torch.library`` custom op with a fake implementation, so it stays inside ``torch.compile``
and ``torch.export`` graphs; :func:`fake_quant_fp8` calls its kernel directly in plain eager
execution (``ops/_quant_ops.py``). float32 inputs run the native kernels; other floating dtypes
run the reference math (same result, no fast path).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from turbo_physai import _core
from turbo_physai.kernels import reference
from turbo_physai.ops import quant_reference
from turbo_physai.ops._dlpack import capsules
from turbo_physai.ops._eager import profiled
from turbo_physai.ops._quant_ops import call, define, fast, grad_needed, native

_NAME = "turbo_physai::fake_quant_fp8"


def layout(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Size, int]:
    """``(shape, k)``: the result's shape, and how many of its leading dims the scale varies
    along (it is constant over the rest, so the result is rows x cols with a scale a row)."""
    if scale.numel() == 1:
        if scale.dim() <= x.dim():  # all ones: x's shape
            return x.shape, 0
        return torch.Size(reference.broadcast_shape(x.shape, scale.shape)), 0
    if reference.fp8_per_channel(x, scale):
        return x.shape, 1
    shape = torch.Size(reference.broadcast_shape(x.shape, scale.shape))
    lead = len(shape) - scale.dim()
    return shape, max((lead + i + 1 for i, n in enumerate(scale.shape) if n != 1), default=0)


def _row_scales(x: torch.Tensor, scale: torch.Tensor, shape: torch.Size, k: int,
                rows: int) -> torch.Tensor:
    """The scale with one element, or one float32 a row in row order (copied only where it is
    broadcast along a row dim)."""
    if k == 0 or reference.fp8_per_channel(x, scale):
        return scale
    if scale.numel() == rows and scale.is_contiguous():
        return scale  # its dims are the leading ones of the result: already in row order
    aligned = scale.reshape((1,) * (len(shape) - scale.dim()) + tuple(scale.shape))
    return aligned.expand(*shape[:k], *aligned.shape[k:]).reshape(-1).contiguous()


def _portable(x: torch.Tensor, scale: torch.Tensor, straight_through: bool) -> torch.Tensor:
    if straight_through:
        return quant_reference.fake_quant_fp8(x, scale)
    return reference.fake_quant_fp8_forward(x, scale)


def kernel(x: torch.Tensor, scale: torch.Tensor, straight_through: bool = False) -> torch.Tensor:
    """The kernel call for float32 CPU/CUDA tensors already checked (no autograd)."""
    shape, k = layout(x, scale)
    rows = math.prod(shape[:k])
    s = _row_scales(x, scale, shape, k, rows)
    x = (x if x.shape == shape else x.expand(shape)).contiguous()
    out = torch.empty(shape, dtype=torch.float32, device=x.device)
    call("fake_quant_fp8", x, *capsules(x, s, out), straight_through, rows)
    return out


def _op_kernel(x, scale, straight_through=False):
    reference.check_fake_quant_fp8(x, scale, _NAME)
    if not native(x, scale, cuda=_core.cuda_kernels):
        return _portable(x, scale, straight_through).contiguous()
    return kernel(x, scale, straight_through)


def _fake(x, scale, straight_through=False):
    reference.check_fake_quant_fp8(x, scale, _NAME)
    if not native(x, scale):
        return _portable(x, scale, straight_through).contiguous()
    return x.new_empty(layout(x, scale)[0])


_op = define(_NAME, "(Tensor x, Tensor scale, bool straight_through=False) -> Tensor",
             _op_kernel, _op_kernel, _fake)


def _setup_context(ctx, inputs, output):
    ctx.x_shape = inputs[0].shape


def _backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
    # straight-through to x (summed where x was broadcast); the scale gets no gradient
    return grad.sum_to_size(ctx.x_shape), None, None


_op.register_autograd(_backward, setup_context=_setup_context)


class _Function(torch.autograd.Function):
    """The eager fast path's autograd: the same kernel and the same backward as the op."""

    @staticmethod
    def forward(ctx, x, scale, straight_through):
        ctx.x_shape = x.shape
        return kernel(x, scale, straight_through)

    @staticmethod
    def backward(ctx, grad):
        return _backward(ctx, grad)


def run(x: torch.Tensor, scale: torch.Tensor, straight_through: bool) -> torch.Tensor:
    """The op, or in plain eager execution its kernel directly (the same bits); x and scale
    float32 CPU/CUDA tensors that the caller checked."""
    if fast(x, scale):
        if grad_needed(x, scale):
            return profiled(_NAME, _Function.apply, x, scale, straight_through)
        return profiled(_NAME, kernel, x, scale, straight_through)
    return _op(x, scale, straight_through)


def fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The ``fake_quant_fp8`` slot's semantics (q, not the straight-through sum) on our kernels:
    per-tensor, per-channel (dim 0) or broadcast scale; see the module doc."""
    if native(x, scale, cuda=_core.cuda_kernels):
        reference.check_fake_quant_fp8(x, scale, _NAME)
        return run(x, scale, False)
    return _op(x, scale)


def register_kernels(register: Callable[..., None]) -> None:
    """Built-in provider hook (turbo_physai.kernels.providers.BUILTIN)."""
    register("fake_quant_fp8", fake_quant_fp8, name="cpp",
             requires={"device": "cpu", "dtype": "float32"})
    if _core.cuda_kernels and torch.cuda.is_available():
        register("fake_quant_fp8", fake_quant_fp8, name="cuda",
                 requires={"device": "cuda", "dtype": "float32"})
