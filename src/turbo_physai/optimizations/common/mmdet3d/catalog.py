"""MMDetection3D catalog (TurboPhysAI's ``turbo_physai.optimizations.common.mmdet3d.catalog``).

Paths are MMDetection3D 0.x-1.0 as vendored by BEVFusion. ``mmdet3d.gaussian`` and
``mmdet3d.sparse_tensor`` have our replacements; TurboPhysAI's kernel groups (``bev_pool``,
``quick_cumsum``, ``voxelization``, ``canonical_indice_pairs``) replace mmdet3d's CUDA ops with
its HIP kernels for Hygon DCUs: declared, and blocked with ``platform.unsupported`` (on CUDA
mmdet3d's own kernels run; turbo_physai has none of these). See docs/catalogs/openmmlab.md.
"""

from __future__ import annotations

from ....engine.declarations import group, replace
from ...unsupported import PLATFORM, UNAVAILABLE, blocked, target

#: The distribution whose code this catalog patches (`turbo-physai list` shows its release).
HOST_PACKAGES = ("mmdet3d",)

_OPT = "turbo_physai.optimizations.common.mmdet3d"
_POOL = "mmdet3d.ops.bev_pool.bev_pool"
_HCU = "TurboPhysAI's HIP kernel for Hygon DCUs ({}); turbo_physai targets CUDA and CPU, where"

GAUSSIAN = group(
    "mmdet3d.gaussian",
    replace(
        target="mmdet3d.core.utils.gaussian.gaussian_2d", replacement=f"{_OPT}.gaussian.gaussian_2d"
    ),
)

SPARSE_TENSOR = group(
    "mmdet3d.sparse_tensor",
    replace(
        target="mmdet3d.ops.spconv.structure.SparseConvTensor.sparity",
        replacement=f"{_OPT}.sparse_tensor.sparity",
    ),
)

BEV_POOL = blocked(
    "mmdet3d.bev_pool",
    target(f"{_POOL}.bev_pool", aliases=(_POOL,)),
    code=PLATFORM,
    missing=_HCU.format("bev_pool") + " mmdet3d's own CUDA bev_pool runs",
)

QUICK_CUMSUM = blocked(
    "mmdet3d.quick_cumsum",
    target(f"{_POOL}.QuickCumsum.forward"),
    target(f"{_POOL}.QuickCumsum.backward"),
    code=UNAVAILABLE,
    missing="turbo_physai has no QuickCumsum forward/backward of its own (TurboPhysAI's are "
    "tuned for Hygon DCUs)",
)

VOXELIZATION = blocked(
    "mmdet3d.voxelization",
    target("mmdet3d.ops.voxel.voxelize._Voxelization.forward"),
    code=PLATFORM,
    missing=_HCU.format("voxelization") + " mmdet3d's own CUDA voxelization runs",
)

CANONICAL_INDICE_PAIRS = blocked(
    "mmdet3d.canonical_indice_pairs",
    target("mmdet3d.ops.spconv.ops.get_indice_pairs"),
    code=PLATFORM,
    missing=_HCU.format("sparse-convolution indice pairs") + " mmdet3d's own spconv ops run",
)

GROUPS = (GAUSSIAN, BEV_POOL, QUICK_CUMSUM, VOXELIZATION, CANONICAL_INDICE_PAIRS, SPARSE_TENSOR)
