"""One module per declaration kind: how it is prepared (resolved and checked), snapshotted and
installed. Undo is the journal's job, the same for every kind."""

from __future__ import annotations

from ..declarations import (
    Declaration,
    ImportAlias,
    OptionalImport,
    RegistryOverride,
    Replace,
    ReplaceImport,
    ReplaceStored,
    Wrap,
)
from . import (
    import_alias,
    object_patch,
    optional_import,
    registry_override,
    replace_import,
    replace_stored,
)
from .base import PrepareContext, Prepared, Transaction

_HANDLERS = {
    Replace: object_patch.prepare,
    Wrap: object_patch.prepare,
    ReplaceStored: replace_stored.prepare,
    ReplaceImport: replace_import.prepare,
    ImportAlias: import_alias.prepare,
    OptionalImport: optional_import.prepare,
    RegistryOverride: registry_override.prepare,
}


def prepare(decl: Declaration, ctx: PrepareContext) -> Prepared:
    return _HANDLERS[type(decl)](decl, ctx)


__all__ = ["Prepared", "PrepareContext", "Transaction", "prepare"]
