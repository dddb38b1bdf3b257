"""Ultralytics catalog: our ``ms_deform_attn`` op in RT-DETR (``RTDETR("rtdetr-l.yaml")`` and
every model whose decoder uses ``ultralytics.nn.modules.transformer.MSDeformAttn``).

One group, ``ultralytics.rtdetr.msda``: ``multi_scale_deformable_attn_pytorch`` (grid_sample per
level, in training and inference) replaced by :func:`turbo_physai.ops.frontends.
ultralytics_function`. ``transformer.py`` imports it by name from ``utils.py``, and that copy is
the one ``MSDeformAttn.forward`` calls: it is the alias replaced with it. Compatibility is by the
function's code (``optimizations/common/ultralytics/msda.py``). See docs/catalogs/ultralytics.md.
"""

from __future__ import annotations

from ..engine.declarations import group, replace

#: The distributions whose code this catalog patches (`turbo-physai list` shows their releases).
HOST_PACKAGES = ("ultralytics",)

_MODULES = "ultralytics.nn.modules"

RTDETR_MSDA = group(
    "ultralytics.rtdetr.msda",
    replace(
        target=f"{_MODULES}.utils.multi_scale_deformable_attn_pytorch",
        aliases=(f"{_MODULES}.transformer.multi_scale_deformable_attn_pytorch",),
        replacement="turbo_physai.ops.frontends.ultralytics_function",
    ),
    compatibility_check="turbo_physai.optimizations.common.ultralytics.msda.check",
)

GROUPS = (RTDETR_MSDA,)
