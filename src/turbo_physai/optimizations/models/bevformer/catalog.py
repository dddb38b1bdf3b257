"""BEVFormer catalog (TurboPhysAI's ``turbo_physai.optimizations.models.bevformer.catalog``).

Targets are the BEVFormer tree (``projects.mmdet3d_plugin``, commit 66b65f3a of
fundamentalvision/BEVFormer as TurboPhysAI pins it) on mmcv 1.x. Ours: ``bevformer.msda`` (our
``ms_deform_attn`` behind BEVFormer's two MSDA autograd Functions), ``bevformer.mdc`` (our DCNv2
for channels_last ``modulated_deform_conv2d`` calls, and the image backbone compiled), the
compile groups. TurboPhysAI's rewrites of BEVFormer's own code (geometry, temporal self
attention, grid mask, training loop) are declared and blocked with ``replacement.unavailable``.
``bevformer.compile`` is TurboPhysAI's earlier single ID for both compile groups.
"""

from __future__ import annotations

from ....engine.declarations import group, replace, wrap
from ...unsupported import UNAVAILABLE, blocked, target

#: BEVFormer is a source tree, not a distribution: `turbo-physai list` shows the releases of the
#: OpenMMLab packages it runs on.
HOST_PACKAGES = ("mmcv-full", "mmcv", "mmdet3d")

_OPT = "turbo_physai.optimizations"
_MDC = f"{_OPT}.common.mmcv.mdc"
_COMPILE = f"{_OPT}.models.bevformer.compile.compile_wrapper"
_MSDA = f"{_OPT}.models.bevformer.msda"
_MODULES = "projects.mmdet3d_plugin.bevformer.modules"
_FUNCTIONS = f"{_MODULES}.multi_scale_deformable_attn_function"
_ENCODER_LAYER = f"{_MODULES}.encoder.BEVFormerLayer.forward"
_DECODER = f"{_MODULES}.decoder.DetectionTransformerDecoder.forward"
_REWRITE = "turbo_physai has no replacement for TurboPhysAI's rewrite of BEVFormer's {}"

MDC = group(
    "bevformer.mdc",
    replace(
        target="mmcv.ops.modulated_deform_conv.modulated_deform_conv2d",
        aliases=("mmcv.ops.modulated_deform_conv2d",),
        replacement=f"{_MDC}.modulated_deform_conv2d",
        runtime_condition=f"{_MDC}.supports_channels_last",
    ),
    wrap(
        target="projects.mmdet3d_plugin.bevformer.detectors.bevformer.BEVFormer.extract_img_feat",
        replacement=_COMPILE,
    ),
    compatibility_check=f"{_MDC}.check_mmcv_version",
)

MSDA = group(
    "bevformer.msda",
    replace(
        target=f"{_FUNCTIONS}.MultiScaleDeformableAttnFunction_fp16",
        aliases=(
            f"{_MODULES}.spatial_cross_attention.MultiScaleDeformableAttnFunction_fp16",
            f"{_MODULES}.decoder.MultiScaleDeformableAttnFunction_fp16",
        ),
        replacement=f"{_MSDA}.MultiScaleDeformableAttnFunction_fp16",
    ),
    replace(
        target=f"{_FUNCTIONS}.MultiScaleDeformableAttnFunction_fp32",
        aliases=(
            f"{_MODULES}.spatial_cross_attention.MultiScaleDeformableAttnFunction_fp32",
            f"{_MODULES}.temporal_self_attention.MultiScaleDeformableAttnFunction_fp32",
            f"{_MODULES}.decoder.MultiScaleDeformableAttnFunction_fp32",
        ),
        replacement=f"{_MSDA}.MultiScaleDeformableAttnFunction_fp32",
    ),
)

GEOMETRY = blocked(
    "bevformer.geometry_sca",
    target(
        "projects.mmdet3d_plugin.datasets.builder.build_dataloader",
        aliases=("projects.mmdet3d_plugin.bevformer.apis.mmdet_train.build_dataloader",),
    ),
    target(f"{_MODULES}.transformer.PerceptionTransformer.get_bev_features"),
    target(f"{_MODULES}.encoder.BEVFormerEncoder.point_sampling"),
    target(f"{_MODULES}.encoder.BEVFormerEncoder.forward"),
    target(f"{_MODULES}.spatial_cross_attention.SpatialCrossAttention.forward"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("camera geometry and spatial cross attention"),
)

TSA = blocked(
    "bevformer.tsa",
    target(f"{_MODULES}.temporal_self_attention.TemporalSelfAttention.forward"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("temporal self attention"),
)

GRID_MASK = blocked(
    "bevformer.grid_mask",
    target("projects.mmdet3d_plugin.models.utils.grid_mask.GridMask.forward"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("GridMask augmentation"),
)

COMPILE_ENCODER = group("bevformer.compile.encoder", wrap(_ENCODER_LAYER, _COMPILE))
COMPILE_DECODER = group("bevformer.compile.decoder", wrap(_DECODER, _COMPILE))
COMPILE = group("bevformer.compile", wrap(_ENCODER_LAYER, _COMPILE), wrap(_DECODER, _COMPILE))

TRAINING = blocked(
    "bevformer.training",
    target(
        "projects.mmdet3d_plugin.bevformer.apis.mmdet_train.custom_train_detector",
        aliases=(
            "projects.mmdet3d_plugin.bevformer.apis.custom_train_detector",
            "projects.mmdet3d_plugin.bevformer.apis.train.custom_train_detector",
        ),
    ),
    code=UNAVAILABLE,
    missing=_REWRITE.format("training loop (custom_train_detector)"),
)

GROUPS = (MDC, MSDA, GEOMETRY, TSA, GRID_MASK, COMPILE_ENCODER, COMPILE_DECODER, COMPILE,
          TRAINING)
