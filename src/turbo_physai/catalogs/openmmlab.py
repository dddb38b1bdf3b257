"""OpenMMLab catalog: the groups of the declarations document (seed 000), declared as written.

Targets are MMCV 1.x / MMDetection3D 0.x-1.0 paths and the BEVFormer and BEVFusion project
trees. Where those packages are not installed every group is blocked at check time with the
target (or module, or registry) it could not resolve. Declaring imports nothing of them.
See docs/catalogs/openmmlab.md for what each group needs and how its numerics were checked.
"""

from __future__ import annotations

from ..compatibility import import_alias, optional_import, registry_override
from ..engine.declarations import group, replace, replace_import, wrap

_OPT = "turbo_physai.optimizations"
_OPS = "turbo_physai.ops.frontends"  # mmcv-compatible MSDA entry points (operators issue)

MSDA = group(
    "mmcv.msda",
    replace(
        target="mmcv._ext.ms_deform_attn_forward",
        replacement=f"{_OPS}.ms_deform_attn_forward",
    ),
    replace(
        target="mmcv._ext.ms_deform_attn_backward",
        replacement=f"{_OPS}.ms_deform_attn_backward",
    ),
)

MDC = group(
    "mmcv.mdc",
    replace(
        target="mmcv.ops.modulated_deform_conv.modulated_deform_conv2d",
        replacement=f"{_OPT}.common.mmcv.mdc.modulated_deform_conv2d",
        runtime_condition=f"{_OPT}.common.mmcv.mdc.supports_channels_last",
    ),
    compatibility_check=f"{_OPT}.common.mmcv.mdc.check_mmcv_version",
)

GAUSSIAN = group(
    "mmdet3d.gaussian",
    replace(
        target="mmdet3d.core.utils.gaussian.gaussian_2d",
        replacement=f"{_OPT}.common.mmdet3d.gaussian.gaussian_2d",
    ),
)

SPARSE_TENSOR = group(
    "mmdet3d.sparse_tensor",
    replace(
        target="mmdet3d.ops.spconv.structure.SparseConvTensor.sparity",
        replacement=f"{_OPT}.common.mmdet3d.sparse_tensor.sparity",
    ),
)

COMPILE_ENCODER = group(
    "bevformer.compile.encoder",
    wrap(
        target="projects.mmdet3d_plugin.bevformer.modules.encoder.BEVFormerLayer.forward",
        replacement=f"{_OPT}.models.bevformer.compile.compile_wrapper",
    ),
)

BEVFUSION_GAUSSIAN = group(
    "bevfusion.gaussian",
    wrap(
        target="mmdet3d.core.utils.gaussian.draw_heatmap_gaussian",
        aliases=(
            "mmdet3d.core.utils.draw_heatmap_gaussian",
            "mmdet3d.core.draw_heatmap_gaussian",
            "mmdet3d.models.heads.bbox.transfusion.draw_heatmap_gaussian",
        ),
        replacement=f"{_OPT}.models.bevfusion.gaussian.compiled_draw_heatmap_gaussian_wrapper",
    ),
    depends_on=("mmdet3d.gaussian",),
)

IMPORT_COMPATIBILITY = group(
    "bevfusion.import_compatibility",
    import_alias(module="flash_attn.modules.mha", source="MHA", alias="FlashMHA"),
    replace_import(target="flash_attn.flash_attention", replacement="flash_attn.modules.mha"),
    optional_import(module="mmdet3d.ops.feature_decorator.feature_decorator_ext"),
    registry_override(
        module="mmdet3d.ops.spconv.conv",
        registry="mmcv.cnn.CONV_LAYERS",
        names=("SparseConv3d", "SubMConv3d"),
    ),
)

GROUPS = (
    MSDA,
    MDC,
    GAUSSIAN,
    SPARSE_TENSOR,
    COMPILE_ENCODER,
    BEVFUSION_GAUSSIAN,
    IMPORT_COMPATIBILITY,
)
