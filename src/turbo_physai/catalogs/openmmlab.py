"""The OpenMMLab groups in one place: those of the catalog modules at TurboPhysAI's paths.

Declared in ``turbo_physai.optimizations.common.mmcv.catalog``, ``...common.mmdet3d.catalog``,
``...models.bevformer.catalog`` and ``...models.bevfusion.catalog`` (discovery registers those;
this module only re-exports them, and a config may name it as an alias of the four). Targets
are MMCV 1.x / MMDetection3D 0.x-1.0 paths and the BEVFormer and BEVFusion project trees. Where
those packages are not installed every group is blocked at check time. See
docs/catalogs/openmmlab.md for what each group needs and how its numerics were checked.
"""

from __future__ import annotations

from ..optimizations.common.mmcv import catalog as mmcv
from ..optimizations.common.mmdet3d import catalog as mmdet3d
from ..optimizations.models.bevformer import catalog as bevformer
from ..optimizations.models.bevfusion import catalog as bevfusion

MSDA, MDC = mmcv.MSDA, mmcv.MDC
GAUSSIAN, SPARSE_TENSOR = mmdet3d.GAUSSIAN, mmdet3d.SPARSE_TENSOR
COMPILE_ENCODER = bevformer.COMPILE_ENCODER
BEVFUSION_GAUSSIAN = bevfusion.GAUSSIAN
IMPORT_COMPATIBILITY = bevfusion.IMPORT_COMPATIBILITY

GROUPS = mmcv.GROUPS + mmdet3d.GROUPS + bevformer.GROUPS + bevfusion.GROUPS
