"""replace_import: a complete module takes over another module path in sys.modules."""

from __future__ import annotations

import sys
import types

from ..declarations import ReplaceImport
from ..paths import ResolutionError, parent_module, resolve_module
from ..report import FAIL, PASS, Check
from .base import PrepareContext, Prepared, Transaction


class ModuleSlot(Prepared):
    """Writes a module object into ``sys.modules[path]`` and onto its parent package."""

    def __init__(self, decl, checks, path: str):
        super().__init__(decl, checks)
        self.path = path
        self.module: types.ModuleType | None = None
        self._entries: list[tuple[int, str]] = []

    def snapshot(self, tx: Transaction) -> None:
        if self.module is None:
            return
        label = f"sys.modules[{self.path}]"
        self._entries = [(tx.snapshot(sys.modules, self.path, label), label)]
        parent = parent_module(self.path)
        if parent is not None:
            leaf = self.path.rpartition(".")[2]
            self._entries.append((tx.snapshot(parent, leaf, self.path), self.path))

    def install(self, tx: Transaction) -> None:
        for entry, label in self._entries:
            tx.set(entry, self.module, label)


def prepare(decl: ReplaceImport, ctx: PrepareContext) -> Prepared:
    slot = ModuleSlot(decl, [], decl.target)
    if decl.target in sys.modules:
        slot.checks.append(
            Check(
                "replace_import.target",
                FAIL,
                f"{decl.target!r} is already imported",
                expected="not imported",
                actual=repr(sys.modules[decl.target]),
                reason="replace_import.already_imported",
            )
        )
        return slot
    slot.checks.append(Check("replace_import.target", PASS, "not imported yet"))
    try:
        slot.module = resolve_module(decl.replacement)
    except ResolutionError as err:
        slot.checks.append(
            Check("replacement.resolve", FAIL, str(err), reason="replacement.unresolved")
        )
        return slot
    slot.checks.append(Check("replacement.resolve", PASS, actual=decl.replacement))
    return slot
