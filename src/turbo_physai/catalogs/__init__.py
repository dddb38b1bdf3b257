"""Built-in catalogs: modules of this package that declare groups.

``BUILTIN`` lists their module paths; :mod:`.discovery` registers them, and every catalog that
third-party packages publish under the entry-point group ``turbo_physai.catalogs``, the first
time check/apply/the CLI need group IDs (never at ``import turbo_physai``). Catalog modules only
declare (string paths): loading one imports no model code and no torch.

The OpenMMLab and model catalogs live at TurboPhysAI's module paths
(``turbo_physai.optimizations.<common|models>.<name>.catalog``), so the ``optimization_modules``
of its configs name them as they are; ``turbo_physai.catalogs.openmmlab`` is an alias for the
OpenMMLab ones.
"""

_OPT = "turbo_physai.optimizations"
OPENMMLAB: tuple[str, ...] = (
    f"{_OPT}.common.mmcv.catalog",
    f"{_OPT}.common.mmdet3d.catalog",
    f"{_OPT}.models.bevformer.catalog",
    f"{_OPT}.models.bevfusion.catalog",
)

BUILTIN: tuple[str, ...] = (
    *OPENMMLAB,
    f"{_OPT}.models.cosmos3.catalog",
    f"{_OPT}.models.openvla.catalog",
    "turbo_physai.catalogs.transformers",
    "turbo_physai.catalogs.timm",
    "turbo_physai.catalogs.ultralytics",
    "turbo_physai.catalogs.rfdetr",
    "turbo_physai.catalogs.libreyolo",
)

#: Names a config may use in ``optimization_modules`` for several built-in catalogs.
ALIASES: dict[str, tuple[str, ...]] = {"turbo_physai.catalogs.openmmlab": OPENMMLAB}
