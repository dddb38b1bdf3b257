"""optional_import: an empty placeholder module, only where the real one cannot be imported."""

from __future__ import annotations

import importlib.machinery
import sys
import types

from ..declarations import OptionalImport
from ..paths import ResolutionError, import_module
from ..report import NOT_APPLICABLE, PASS, Check
from .base import PrepareContext, Prepared
from .replace_import import ModuleSlot

PLACEHOLDER_MARK = "__turbo_physai_placeholder__"


def placeholder(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "Empty placeholder installed by turbo_physai.optional_import.")
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    setattr(module, PLACEHOLDER_MARK, True)
    return module


def prepare(decl: OptionalImport, ctx: PrepareContext) -> Prepared:
    slot = ModuleSlot(decl, [], decl.module)
    current = sys.modules.get(decl.module)
    if current is not None and not getattr(current, PLACEHOLDER_MARK, False):
        slot.checks.append(Check("optional_import.module", NOT_APPLICABLE, "already imported"))
        return slot
    try:
        import_module(
            decl.module
        )  # the real module wins whenever it imports (TurboPhysAI shadows it)
    except ResolutionError as err:
        slot.module = placeholder(decl.module)
        slot.checks.append(
            Check("optional_import.module", PASS, f"placeholder: {err}", actual="placeholder")
        )
        return slot
    slot.checks.append(Check("optional_import.module", NOT_APPLICABLE, "the real module imports"))
    return slot
