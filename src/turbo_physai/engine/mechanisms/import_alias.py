"""import_alias: a second name in a module for an object it already has."""

from __future__ import annotations

from ..declarations import ImportAlias
from ..paths import MISSING, ResolutionError, resolve, resolve_module
from ..report import FAIL, NOT_APPLICABLE, PASS, Check
from .base import PrepareContext, Prepared, Transaction


class AliasName(Prepared):
    def __init__(self, decl: ImportAlias, checks):
        super().__init__(decl, checks)
        self.module = None
        self.value = MISSING
        self._entry = -1

    def snapshot(self, tx: Transaction) -> None:
        if self.value is not MISSING:
            label = f"{self.declaration.module}.{self.declaration.alias}"
            self._entry = tx.snapshot(self.module, self.declaration.alias, label)

    def install(self, tx: Transaction) -> None:
        if self.value is not MISSING:
            label = f"{self.declaration.module}.{self.declaration.alias}"
            tx.set(self._entry, self.value, label)


def prepare(decl: ImportAlias, ctx: PrepareContext) -> Prepared:
    alias = AliasName(decl, [])
    try:
        module = resolve_module(decl.module)
        source = resolve(f"{decl.module}.{decl.source}").found
    except ResolutionError as err:
        alias.checks.append(
            Check("import_alias.source", FAIL, str(err), reason="target.unresolved")
        )
        return alias
    existing = vars(module).get(decl.alias, MISSING)
    if existing is source:
        alias.checks.append(Check("import_alias.alias", NOT_APPLICABLE, "alias already names it"))
        return alias
    if existing is not MISSING:
        alias.checks.append(
            Check(
                "import_alias.alias",
                FAIL,
                f"{decl.module}.{decl.alias} exists and is another object",
                expected=repr(source),
                actual=repr(existing),
                reason="import_alias.conflict",
            )
        )
        return alias
    alias.checks.append(Check("import_alias.alias", PASS))
    alias.module, alias.value = module, source
    return alias
