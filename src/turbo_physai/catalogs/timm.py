"""timm catalog: fused scaled-dot-product attention for every timm model built while applied.

One group, ``timm.fused_attention``: a wrap of ``timm.create_model`` (the function object that
``timm``, ``timm.models`` and ``timm.models._factory`` all hold) that sets each new model's
``fused_attn`` flags through the apply journal, so rollback() restores them.
See ``optimizations/common/timm/attention.py`` for why it cannot be a class-level patch.
"""

from __future__ import annotations

from ..engine.declarations import group, wrap

#: The distributions whose code this catalog patches (`turbo-physai list` shows their releases).
HOST_PACKAGES = ("timm",)

FUSED_ATTENTION = group(
    "timm.fused_attention",
    wrap(
        target="timm.models._factory.create_model",
        aliases=("timm.create_model", "timm.models.create_model"),
        replacement="turbo_physai.optimizations.common.timm.attention.fused_attention_wrapper",
    ),
)

GROUPS = (FUSED_ATTENTION,)
