"""Portable references of the built-in slots: they define the numbers, kernels make them fast."""

from __future__ import annotations

import torch

from turbo_physai.kernels._torch import exporting

FP8_E4M3_MAX = 448.0
SCALE_MIN = 1e-12


def check_fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor, impl: str) -> None:
    """Raise a ValueError/TypeError naming the implementation, the tensor and what was expected."""
    where = f"fake_quant_fp8 (implementation {impl!r})"
    for label, t in (("x", x), ("scale", scale)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{where}: {label} must be a floating tensor, got {t.dtype}")
    if scale.device != x.device:
        raise ValueError(f"{where}: scale is on {scale.device}, x on {x.device}")
    channels = x.shape[0] if x.dim() else 1
    if scale.numel() != 1 and (scale.dim() != 1 or scale.shape[0] != channels):
        raise ValueError(
            f"{where}: scale must have 1 element (per-tensor) or shape ({channels},) "
            f"(per-channel along dim 0 of x with shape {tuple(x.shape)}), "
            f"got shape {tuple(scale.shape)}"
        )


def fake_quant_fp8_forward(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``(x / s).clamp(+-448) -> float8_e4m3fn -> float32 * s`` with ``s = max(scale, 1e-12)``,
    computed in float32 and returned in x's dtype. No autograd: see :func:`fake_quant_fp8`."""
    s = scale.to(torch.float32).clamp(min=SCALE_MIN)
    if s.numel() != 1:
        s = s.reshape((-1,) + (1,) * (x.dim() - 1))
    q = (x.to(torch.float32) / s).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return (q.to(torch.float8_e4m3fn).to(torch.float32) * s).to(x.dtype)


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return fake_quant_fp8_forward(x, scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def fake_quant_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Reference of the ``fake_quant_fp8`` slot: per-tensor or per-channel (dim 0) scale,
    straight-through gradient to ``x``, none to ``scale``."""
    check_fake_quant_fp8(x, scale, "reference")
    if exporting():  # an autograd.Function would be traced as an opaque PythonOp
        return fake_quant_fp8_forward(x, scale)
    return _StraightThrough.apply(x, scale)
