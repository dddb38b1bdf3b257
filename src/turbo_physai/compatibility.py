"""Import-compatibility declarations: applied before every other group, never mixed with them."""

from .engine.declarations import import_alias, optional_import, registry_override, replace_import

__all__ = ["import_alias", "optional_import", "registry_override", "replace_import"]
