"""Built-in catalogs: modules of this package that declare groups.

``BUILTIN`` lists their module paths; :mod:`.discovery` registers them, and every catalog that
third-party packages publish under the entry-point group ``turbo_physai.catalogs``, the first
time check/apply/the CLI need group IDs (never at ``import turbo_physai``). The catalogs of real
models are added here by their own change.
"""

BUILTIN: tuple[str, ...] = ()
