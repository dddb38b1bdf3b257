"""Ultralytics catalog: our ``ms_deform_attn`` op in RT-DETR (``RTDETR("rtdetr-l.yaml")`` and
every model whose decoder uses ``ultralytics.nn.modules.transformer.MSDeformAttn``).

``ultralytics.rtdetr.msda``: ``multi_scale_deformable_attn_pytorch`` (grid_sample per
level, in training and inference) replaced by :func:`turbo_physai.ops.frontends.
ultralytics_function`. ``transformer.py`` imports it by name from ``utils.py``, and that copy is
the one ``MSDeformAttn.forward`` calls: it is the alias replaced with it. Compatibility is by the
function's code (``optimizations/common/ultralytics/msda.py``). ``ultralytics.rtdetr.cuda_graph``:
inference replayed as CUDA graphs. See docs/catalogs/ultralytics.md.
"""

from __future__ import annotations

from ..engine.declarations import group, replace
from ..optimizations.common.cuda_graph import capture_group

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

# RTDETRDetectionModel.predict (backbone, hybrid encoder, decoder) captured and replayed as CUDA
# graphs (optimizations.common.cuda_graph) for inference. In training its denoising queries take
# noise drawn on the host (torch.rand on the CPU): the capture fails (host data that changes) and
# training runs eagerly with a RuntimeWarning saying so.
RTDETR_CUDA_GRAPH = capture_group(
    "ultralytics.rtdetr.cuda_graph", "ultralytics.nn.tasks.RTDETRDetectionModel.predict",
    depends_on=("ultralytics.rtdetr.msda",),
)

GROUPS = (RTDETR_MSDA, RTDETR_CUDA_GRAPH)
