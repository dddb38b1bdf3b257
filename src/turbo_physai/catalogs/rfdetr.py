"""Roboflow RF-DETR catalog: our ``ms_deform_attn`` op in every RF-DETR model (detection,
segmentation, keypoints: all decoders use ``rfdetr.models.ops.modules.MSDeformAttn``).

``rfdetr.msda``: the pure-PyTorch core ``ms_deform_attn_core_pytorch`` (grid_sample
per level; RF-DETR has no compiled kernel) replaced by :func:`turbo_physai.ops.frontends.
rfdetr_function`, with the two copies its package modules import by name (the one in
``modules/ms_deform_attn.py`` is the one ``MSDeformAttn.forward`` calls). Compatibility is by the
code of the core and of the grid_sample helper it calls (``optimizations/common/rfdetr/msda.py``).
``rfdetr.cuda_graph``: inference and the training forward/backward replayed as CUDA graphs.
See docs/catalogs/rfdetr.md.
"""

from __future__ import annotations

from ..engine.declarations import group, replace
from ..optimizations.common.cuda_graph import capture_group

#: The distributions whose code this catalog patches (`turbo-physai list` shows their releases).
HOST_PACKAGES = ("rfdetr",)

_OPS = "rfdetr.models.ops"

MSDA = group(
    "rfdetr.msda",
    replace(
        target=f"{_OPS}.functions.ms_deform_attn_func.ms_deform_attn_core_pytorch",
        aliases=(
            f"{_OPS}.functions.ms_deform_attn_core_pytorch",
            f"{_OPS}.modules.ms_deform_attn.ms_deform_attn_core_pytorch",
        ),
        replacement="turbo_physai.ops.frontends.rfdetr_function",
    ),
    compatibility_check="turbo_physai.optimizations.common.rfdetr.msda.check",
)

# LWDETR.forward captured and replayed as CUDA graphs (optimizations.common.cuda_graph), in
# inference and training: training passes the targets, which the forward never reads (the loss
# does; checked in its source when the group applies), so they are left out of the capture.
CUDA_GRAPH = capture_group(
    "rfdetr.cuda_graph", "rfdetr.models.lwdetr.LWDETR.forward", depends_on=("rfdetr.msda",),
    targets_unread=True,
)

GROUPS = (MSDA, CUDA_GRAPH)
