"""Built-in catalogs: modules of this package that declare groups.

``BUILTIN`` lists their module paths; :mod:`.discovery` registers them, and every catalog that
third-party packages publish under the entry-point group ``turbo_physai.catalogs``, the first
time check/apply/the CLI need group IDs (never at ``import turbo_physai``). Catalog modules only
declare (string paths): loading one imports no model code and no torch.
"""

BUILTIN: tuple[str, ...] = (
    "turbo_physai.catalogs.openmmlab",
    "turbo_physai.catalogs.transformers",
    "turbo_physai.catalogs.timm",
)
