"""Ultralytics catalog: our ``ms_deform_attn`` op in RT-DETR (``RTDETR("rtdetr-l.yaml")`` and
every model whose decoder uses ``ultralytics.nn.modules.transformer.MSDeformAttn``).

``ultralytics.rtdetr.msda``: ``multi_scale_deformable_attn_pytorch`` (grid_sample per
level, in training and inference) replaced by :func:`turbo_physai.ops.frontends.
ultralytics_function`. ``transformer.py`` imports it by name from ``utils.py``, and that copy is
the one ``MSDeformAttn.forward`` calls: it is the alias replaced with it. Compatibility is by the
function's code (``optimizations/common/ultralytics/msda.py``). ``ultralytics.rtdetr.cuda_graph``:
inference replayed as CUDA graphs, and in training the layers before the decoder.
``ultralytics.rtdetr.loss_graph_safe``: the training loss without the host synchronizations that
have an exact rewrite. ``ultralytics.rtdetr.denoising_graph_safe``: the denoising queries' class
noise drawn before the training ``predict``, which is then captured whole.
``ultralytics.rtdetr.loss_cuda_graph``: the training loss captured too. See
docs/catalogs/ultralytics.md.
"""

from __future__ import annotations

from ..engine.declarations import group, replace, wrap
from ..optimizations.common.cuda_graph import capture_group

#: The distributions whose code this catalog patches (`turbo-physai list` shows their releases).
HOST_PACKAGES = ("ultralytics",)

_MODULES = "ultralytics.nn.modules"
_LOSS_WRAPPER = "turbo_physai.optimizations.common.ultralytics.loss.loss_wrapper"

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
# graphs (optimizations.common.cuda_graph). In training its denoising queries take noise drawn on
# the host (torch.rand on the CPU), which a replay cannot draw: there the layers before the
# decoder are replayed, forward and backward, and the decoder runs eagerly
# (optimizations.common.ultralytics.graphs).
RTDETR_CUDA_GRAPH = group(
    "ultralytics.rtdetr.cuda_graph",
    wrap(target="ultralytics.nn.tasks.RTDETRDetectionModel.predict",
         replacement="turbo_physai.optimizations.common.ultralytics.graphs.predict_wrapper"),
    depends_on=("ultralytics.rtdetr.msda",),
    compatibility_check="turbo_physai.optimizations.common.ultralytics.graphs.check",
)

# The training loss's host synchronizations that have an exact rewrite (per-image box counts,
# the matcher's cost to scipy per decoder layer) taken out: results unchanged, the host no
# longer waits for the GPU there (optimizations.common.ultralytics.loss).
RTDETR_LOSS = group(
    "ultralytics.rtdetr.loss_graph_safe",
    wrap(target="ultralytics.nn.tasks.RTDETRDetectionModel.loss", replacement=_LOSS_WRAPPER),
    wrap(target="ultralytics.models.utils.ops.HungarianMatcher.forward",
         replacement=_LOSS_WRAPPER),
    compatibility_check="turbo_physai.optimizations.common.ultralytics.loss.check",
)

# The denoising queries' class noise taken from numbers the training predict draws before the
# call (the same host draw), so that ultralytics.rtdetr.cuda_graph captures the whole training
# predict; without numbers handed over, get_cdn_group runs as it is
# (optimizations.common.ultralytics.denoising).
RTDETR_DENOISING = group(
    "ultralytics.rtdetr.denoising_graph_safe",
    wrap(target="ultralytics.models.utils.ops.get_cdn_group",
         replacement="turbo_physai.optimizations.common.ultralytics.denoising.cdn_wrapper"),
    depends_on=("ultralytics.rtdetr.cuda_graph",),
    compatibility_check="turbo_physai.optimizations.common.ultralytics.denoising.check",
)

# The training loss (matching, the losses of every decoder output and of the denoising queries)
# captured and replayed, forward and backward, after loss_graph_safe took its host waits out.
# Its denoising indices are host tensors: a call with other values than the captured one's (an
# image with more than num_denoising boxes draws them) runs eagerly (cuda_graph).
RTDETR_LOSS_GRAPH = capture_group(
    "ultralytics.rtdetr.loss_cuda_graph",
    "ultralytics.models.utils.loss.RTDETRDetectionLoss.forward",
    depends_on=("ultralytics.rtdetr.loss_graph_safe",))

GROUPS = (RTDETR_MSDA, RTDETR_CUDA_GRAPH, RTDETR_LOSS, RTDETR_DENOISING, RTDETR_LOSS_GRAPH)
