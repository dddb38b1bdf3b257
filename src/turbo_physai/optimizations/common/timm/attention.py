"""``timm.fused_attention``: timm models built while the group is applied get our fused
attention policy on every attention module, and rollback() puts their flags back.

timm reads ``self.fused_attn`` at forward time and sets it once, in each attention module's
``__init__`` (from ``timm.layers.use_fused_attn()``). A class-level patch cannot change a flag
that lives on instances, so the group wraps ``create_model``, the factory every timm model goes
through, and writes each new model's flags through :func:`turbo_physai.record_write`: the
active apply's journal then restores them, exactly, on rollback.

What the flag becomes: :data:`~turbo_physai.kernels.attention.FUSED_WHEN_EAGER`, truthy in eager
runs (fused SDPA) and falsy under tracing/ONNX export (timm's manual math), also for modules timm
leaves unfused by default (``use_fused_attn(experimental=True)``) or when ``TIMM_FUSED_ATTN=0``.

Not reached: models built before apply() or without ``create_model`` (call
``turbo_physai.kernels.attention.set_fused_attention(model)`` for those).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

GROUP = "timm.fused_attention"


def fused_attention_wrapper(
    original: Callable[..., Any], options: Mapping[str, Any]
) -> Callable[..., Any]:
    """Wrap factory for ``timm.create_model``."""
    if options:
        raise ValueError(f"{GROUP} takes no options, got {sorted(options)}")

    @functools.wraps(original)
    def create_model(*args: Any, **kwargs: Any) -> Any:
        from turbo_physai.engine.session import record_write
        from turbo_physai.kernels.attention import FUSED_WHEN_EAGER, flagged_modules

        model = original(*args, **kwargs)
        for module in flagged_modules(model):
            if not record_write(GROUP, module, "fused_attn", FUSED_WHEN_EAGER):
                break  # called through a reference kept past rollback: stock behaviour
        return model

    return create_model
