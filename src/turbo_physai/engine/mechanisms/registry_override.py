"""registry_override: while a module is imported, named entries may override registry entries.

mmcv 1.x and mmengine registries refuse duplicate names unless ``force=True``. During the import
we shadow ``registry._register_module`` with an instance attribute that forces the declared
names only; other names keep the registry's own duplicate rule. The registry entries themselves
are journaled, so rollback restores the original classes.
"""

from __future__ import annotations

import inspect
import sys
import weakref
from typing import Any

from ..declarations import RegistryOverride
from ..paths import MISSING, ResolutionError, import_module, resolve_object
from ..report import FAIL, PASS, WARNING, Check
from .base import PrepareContext, Prepared, Transaction

#: module -> {(registry path, name): what importing it registered}, recorded by the forced
#: import so that a later apply (after rollback, or after check()) reinstates the same objects
#: even where the module binds them under other names. Weak: a module that goes, goes.
_REGISTERED: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary()
)


class Override(Prepared):
    def __init__(self, decl: RegistryOverride, checks):
        super().__init__(decl, checks)
        self.registry: Any = None
        #: The module's registrations by name when it is imported already, else None.
        self.known: dict[str, Any] | None = None
        self._entries: dict[str, int] = {}
        self._before: dict[str, Any] = {}

    def _label(self, name: str) -> str:
        return f"{self.declaration.registry}[{name}]"

    def snapshot(self, tx: Transaction) -> None:
        table = self.registry.module_dict
        self._before = {n: table.get(n, MISSING) for n in self.declaration.names}
        self._entries = {n: tx.snapshot(table, n, self._label(n)) for n in self.declaration.names}

    def install(self, tx: Transaction) -> None:
        if self.known is not None:
            self._set(tx, self.known)
            return
        decl, table = self.declaration, self.registry.module_dict
        keys = set(table)
        hook = _forcing(self.registry._register_module, frozenset(decl.names))
        label = f"{decl.registry}._register_module"
        imported = False
        try:
            with tx.temporarily(self.registry, "_register_module", hook, label):
                import_module(decl.module)
            imported = True
        finally:
            # Also when the import raised half way (after registering a declared name): what
            # it wrote under the declared names goes into the journal, which restores it, and
            # names it added besides go again with the module Python just dropped.
            found = {n: table.get(n, MISSING) for n in decl.names}
            self._set(tx, found)
            if not imported:
                for name in set(table) - keys - set(decl.names):
                    table.pop(name, None)
        changed = {(decl.registry, n): v for n, v in found.items() if v is not self._before[n]}
        module = sys.modules.get(decl.module)
        if module is not None:
            _REGISTERED.setdefault(module, {}).update(changed)

    def _set(self, tx: Transaction, found: dict[str, Any]) -> None:
        for name, value in found.items():
            if value is not MISSING and value is not self._before[name]:
                tx.set(self._entries[name], value, self._label(name))


def _forcing(register: Any, names: frozenset[str]) -> Any:
    signature = inspect.signature(register)

    def register_forcing_declared_names(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        module = next(iter(bound.arguments.values()))
        given = bound.arguments.get("module_name") or getattr(module, "__name__", None)
        given = [given] if isinstance(given, str) else list(given or ())
        if any(n in names for n in given):
            bound.arguments["force"] = True
        return register(*bound.args, **bound.kwargs)

    return register_forcing_declared_names


def prepare(decl: RegistryOverride, ctx: PrepareContext) -> Prepared:
    override = Override(decl, [])
    try:
        registry = resolve_object(decl.registry)
    except ResolutionError as err:
        override.checks.append(
            Check("registry.resolve", FAIL, str(err), reason="target.unresolved")
        )
        return override
    table = getattr(registry, "module_dict", None)
    register = getattr(registry, "_register_module", None)
    if not isinstance(table, dict) or not callable(register):
        override.checks.append(
            Check(
                "registry.shape",
                FAIL,
                "not an mmcv/mmengine-style registry",
                expected="writable dict module_dict and callable _register_module",
                actual={
                    "module_dict": type(table).__name__,
                    "_register_module": callable(register),
                },
                reason="registry.unsupported",
            )
        )
        return override
    try:
        inspect.signature(register).bind(object, module_name="x", force=True)
    except (TypeError, ValueError) as err:
        override.checks.append(
            Check("registry.shape", FAIL, f"_register_module: {err}", reason="registry.unsupported")
        )
        return override
    override.checks.append(Check("registry.shape", PASS))
    override.registry = registry
    if decl.module in sys.modules:
        _already_imported(override, sys.modules[decl.module])
    return override


def _already_imported(override: Override, module: Any) -> None:
    """Its registrations ran already (or were rolled back): reinstate what its forced import
    registered, else the module's own objects of the declared names; refuse when neither is
    known rather than report applied while the registry keeps the stock class."""
    decl = override.declaration
    if module in _REGISTERED:  # imported by a forced import: exactly what it registered
        recorded = _REGISTERED[module]
        override.known = {
            n: recorded[(decl.registry, n)] for n in decl.names if (decl.registry, n) in recorded
        }
        how = "what its import registered"
    else:
        known = {n: vars(module).get(n, MISSING) for n in decl.names}
        missing = [n for n, value in known.items() if value is MISSING]
        if missing:
            override.checks.append(
                Check(
                    "registry.module",
                    FAIL,
                    f"{decl.module!r} was imported before turbo_physai could see what it "
                    f"registers as {', '.join(map(repr, missing))}, and it has no module "
                    "attribute of that name",
                    reason="registry.unknown_registration",
                )
            )
            return
        override.known, how = known, "its own objects"
    override.checks.append(
        Check(
            "registry.module",
            WARNING,
            f"{decl.module!r} is already imported: {how} are installed under the declared names",
        )
    )
