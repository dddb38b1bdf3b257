"""BEVFusion catalog (TurboPhysAI's ``turbo_physai.optimizations.models.bevfusion.catalog``).

Targets are MIT's BEVFusion tree (its vendored mmdet3d, commit 326653dc as TurboPhysAI pins it)
on mmcv 1.x. Ours: the import compatibility for current flash-attn/mmcv, the compiled
Gaussian heatmap targets and the compile groups. TurboPhysAI's rewrites of BEVFusion's own code
(backbone, losses, training loop, depth, geometry, TransFusion assignment, box coder) are
declared and blocked with ``replacement.unavailable``. ``bevfusion.compile`` is TurboPhysAI's
earlier single ID for the five ``bevfusion.compile.*`` groups.
"""

from __future__ import annotations

from ....compatibility import import_alias, optional_import, registry_override
from ....engine.declarations import group, replace_import, wrap
from ...unsupported import UNAVAILABLE, blocked, target

#: BEVFusion is a source tree, not a distribution: `turbo-physai list` shows the releases of its
#: vendored MMDetection3D and of flash-attn, which its attention groups patch.
HOST_PACKAGES = ("mmdet3d", "flash-attn")

_OPT = "turbo_physai.optimizations.models.bevfusion"
_GAUSSIAN = "mmdet3d.core.utils.gaussian"
_HEAD = "mmdet3d.models.heads.bbox.transfusion"
_VT = "mmdet3d.models.vtransforms"
_REWRITE = "turbo_physai has no replacement for TurboPhysAI's rewrite of BEVFusion's {}"

IMPORT_COMPATIBILITY = group(
    "bevfusion.import_compatibility",
    import_alias(module="flash_attn.modules.mha", source="MHA", alias="FlashMHA"),
    replace_import(target="flash_attn.flash_attention", replacement="flash_attn.modules.mha"),
    optional_import(module="mmdet3d.ops.feature_decorator.feature_decorator_ext"),
    registry_override(
        module="mmdet3d.ops.spconv.conv",
        registry="mmcv.cnn.CONV_LAYERS",
        names=(
            "SparseConv2d",
            "SparseConv3d",
            "SparseConv4d",
            "SparseConvTranspose2d",
            "SparseConvTranspose3d",
            "SparseInverseConv2d",
            "SparseInverseConv3d",
            "SubMConv2d",
            "SubMConv3d",
            "SubMConv4d",
        ),
    ),
)

BACKBONE = blocked(
    "bevfusion.backbone",
    target("mmdet3d.models.fusion_models.bevfusion.BEVFusion.extract_camera_features"),
    target("mmdet3d.models.fusion_models.bevfusion.BEVFusion.extract_features"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("feature extraction"),
)

LOSS_REDUCTION = blocked(
    "bevfusion.loss_reduction",
    target("mmdet3d.models.fusion_models.base.Base3DFusionModel._parse_losses"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("loss reduction (_parse_losses)"),
)

TRAINING = blocked(
    "bevfusion.training",
    target("mmdet3d.apis.train.train_model", aliases=("mmdet3d.apis.train_model",)),
    code=UNAVAILABLE,
    missing=_REWRITE.format("training loop (train_model)"),
)

GAUSSIAN = group(
    "bevfusion.gaussian",
    wrap(
        target=f"{_GAUSSIAN}.draw_heatmap_gaussian",
        aliases=(
            "mmdet3d.core.utils.draw_heatmap_gaussian",
            "mmdet3d.core.draw_heatmap_gaussian",
            f"{_HEAD}.draw_heatmap_gaussian",
        ),
        replacement=f"{_OPT}.gaussian.compiled_draw_heatmap_gaussian_wrapper",
    ),
    wrap(
        target=f"{_GAUSSIAN}.gaussian_radius",
        aliases=(
            "mmdet3d.core.utils.gaussian_radius",
            "mmdet3d.core.gaussian_radius",
            f"{_HEAD}.gaussian_radius",
        ),
        replacement=f"{_OPT}.gaussian.compiled_gaussian_radius_wrapper",
    ),
    depends_on=("mmdet3d.gaussian",),
)

DEPTH_FACTORIZATION = blocked(
    "bevfusion.depth_factorization",
    target(f"{_VT}.base.BaseTransform.__init__"),
    target(f"{_VT}.base.BaseDepthTransform.forward"),
    target(f"{_VT}.depth_lss.DepthLSSTransform.get_cam_feats"),
    target(f"{_VT}.base.BaseTransform.bev_pool"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("depth transform"),
    depends_on=("mmdet3d.bev_pool",),
)

BEV_GEOMETRY = blocked(
    "bevfusion.bev_geometry",
    target(f"{_VT}.base.BaseTransform.get_geometry"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("BEV geometry (get_geometry)"),
    depends_on=("bevfusion.depth_factorization",),
)

HUNGARIAN_TRANSFER = blocked(
    "bevfusion.hungarian_transfer",
    target(f"{_HEAD}.TransFusionHead.__init__"),
    target(f"{_HEAD}.TransFusionHead.get_targets"),
    target(f"{_HEAD}.TransFusionHead.get_targets_single"),
    target(f"{_HEAD}.TransFusionHead.loss"),
    target("mmdet3d.core.bbox.assigners.hungarian_assigner.HungarianAssigner3D.assign"),
    code=UNAVAILABLE,
    missing=_REWRITE.format("TransFusion target assignment"),
)

_CLASSES = {
    "sparse_encoder": "mmdet3d.models.backbones.sparse_encoder.SparseEncoder",
    "fuser": "mmdet3d.models.fusers.conv.ConvFuser",
    "camera": "mmdet3d.models.necks.generalized_lss.GeneralizedLSSFPN",
    "depth_transform": f"{_VT}.depth_lss.DepthLSSTransform",
}
_COMPILE_CLASS = f"{_OPT}.compile.compile_class_wrapper"
_TRANSFUSION = (
    wrap(f"{_HEAD}.TransFusionHead.forward_single",
         f"{_OPT}.compile.compile_transfusion_forward_single_wrapper"),
    wrap("mmdet3d.models.utils.transformer.PositionEmbeddingLearned.forward",
         f"{_OPT}.compile.dynamo_disable_wrapper"),
    wrap("mmdet3d.models.utils.transformer.FFN.forward", f"{_OPT}.compile.dynamo_disable_wrapper"),
)
COMPILE_SPARSE_ENCODER, COMPILE_FUSER, COMPILE_CAMERA, COMPILE_DEPTH_TRANSFORM = (
    group(f"bevfusion.compile.{name}", wrap(path, _COMPILE_CLASS))
    for name, path in _CLASSES.items()
)
COMPILE_TRANSFUSION = group("bevfusion.compile.transfusion", *_TRANSFUSION)
COMPILE = group(
    "bevfusion.compile", *(wrap(path, _COMPILE_CLASS) for path in _CLASSES.values()), *_TRANSFUSION
)

TRANSFUSION_BBOX_CODER = blocked(
    "bevfusion.transfusion_bbox_coder",
    target(
        "mmdet3d.core.bbox.coders.transfusion_bbox_coder.TransFusionBBoxCoder",
        aliases=("mmdet3d.core.bbox.coders.TransFusionBBoxCoder",),
    ),
    target(
        "mmdet.core.bbox.builder.build_bbox_coder",
        aliases=("mmdet.core.build_bbox_coder", f"{_HEAD}.build_bbox_coder"),
    ),
    code=UNAVAILABLE,
    missing=_REWRITE.format("TransFusion box coder"),
)

GROUPS = (
    IMPORT_COMPATIBILITY,
    BACKBONE,
    LOSS_REDUCTION,
    TRAINING,
    GAUSSIAN,
    DEPTH_FACTORIZATION,
    BEV_GEOMETRY,
    HUNGARIAN_TRANSFER,
    COMPILE_SPARSE_ENCODER,
    COMPILE_FUSER,
    COMPILE_CAMERA,
    COMPILE_TRANSFUSION,
    COMPILE_DEPTH_TRANSFORM,
    COMPILE,
    TRANSFUSION_BBOX_CODER,
)
