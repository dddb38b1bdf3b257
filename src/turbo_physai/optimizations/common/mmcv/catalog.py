"""MMCV catalog (TurboPhysAI's ``turbo_physai.optimizations.common.mmcv.catalog``).

``mmcv.msda``: our ``ms_deform_attn`` behind mmcv 1.x's compiled ``_ext`` entry points.
``mmcv.mdc``: our DCNv2 for channels_last calls of ``modulated_deform_conv2d`` (ours; TurboPhysAI
has no such group in this catalog). Declaring imports nothing of mmcv; where it is not installed
both are blocked with ``target.unresolved``. See docs/catalogs/openmmlab.md.
"""

from __future__ import annotations

from ....engine.declarations import group, replace

#: The distributions whose code this catalog patches (`turbo-physai list` shows their releases):
#: MMCV 1.x as mmcv-full, or 2.x as mmcv.
HOST_PACKAGES = ("mmcv-full", "mmcv")

_OPS = "turbo_physai.ops.frontends"  # mmcv-compatible MSDA entry points
_MDC = "turbo_physai.optimizations.common.mmcv.mdc"

MSDA = group(
    "mmcv.msda",
    replace(
        target="mmcv._ext.ms_deform_attn_forward", replacement=f"{_OPS}.ms_deform_attn_forward"
    ),
    replace(
        target="mmcv._ext.ms_deform_attn_backward", replacement=f"{_OPS}.ms_deform_attn_backward"
    ),
)

MDC = group(
    "mmcv.mdc",
    replace(
        target="mmcv.ops.modulated_deform_conv.modulated_deform_conv2d",
        replacement=f"{_MDC}.modulated_deform_conv2d",
        runtime_condition=f"{_MDC}.supports_channels_last",
    ),
    compatibility_check=f"{_MDC}.check_mmcv_version",
)

GROUPS = (MSDA, MDC)
