"""Fused scaled-dot-product attention as a policy: on in eager runs, never in exported graphs.

SDPA needs no optional package, so whether it runs is a policy, not availability. Exports take
manual math: ONNX's default opset has no SDPA symbolic, and ``torch.jit.trace`` feeds
TorchScript/CoreML pipelines that want primitive ops. Dynamo captures are left alone on purpose:
``torch.compile`` compiles SDPA better than the manual form.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from turbo_physai.kernels._torch import exporting


class _FusedWhenEager:
    """Truthy except while tracing/exporting. timm reads ``if self.fused_attn:`` at forward
    time, so this one object routes every flagged module to manual math inside an export."""

    def __bool__(self) -> bool:
        return not exporting()

    def __repr__(self) -> str:
        return "FUSED_WHEN_EAGER"


FUSED_WHEN_EAGER = _FusedWhenEager()


def set_fused_attention(model: torch.nn.Module, enabled: bool = True) -> int:
    """Set the ``fused_attn`` flag (timm's convention) of every submodule that has one.

    ``enabled=True`` installs :data:`FUSED_WHEN_EAGER` (fused in eager mode, manual math under
    tracing/export); ``False`` forces manual math. Returns how many modules now carry the
    requested setting, i.e. how many attention modules the model has with that flag.
    """
    flag = FUSED_WHEN_EAGER if enabled else False
    switched = 0
    for module in flagged_modules(model):
        module.fused_attn = flag
        switched += 1
    return switched


def flagged_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Submodules with a boolean (or :data:`FUSED_WHEN_EAGER`) ``fused_attn`` flag."""
    return [
        m for m in model.modules()
        if isinstance(getattr(m, "fused_attn", None), (bool, _FusedWhenEager))
    ]


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` in eager mode, the same math in primitive ops under
    tracing/export (for call sites we own)."""
    if not exporting():
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ k.transpose(-2, -1)
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        causal = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = scores.softmax(dim=-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v
