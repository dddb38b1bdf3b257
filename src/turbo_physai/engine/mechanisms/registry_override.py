"""registry_override: while a module is imported, named entries may override registry entries.

mmcv 1.x and mmengine registries refuse duplicate names unless ``force=True``. During the import
we shadow ``registry._register_module`` with an instance attribute that forces the declared
names only; other names keep the registry's own duplicate rule. The registry entries themselves
are journaled, so rollback restores the original classes.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from ..declarations import RegistryOverride
from ..paths import MISSING, ResolutionError, import_module, resolve_object
from ..report import FAIL, PASS, WARNING, Check
from .base import PrepareContext, Prepared, Transaction


class Override(Prepared):
    def __init__(self, decl: RegistryOverride, checks):
        super().__init__(decl, checks)
        self.registry: Any = None
        self._entries: dict[str, int] = {}

    def _label(self, name: str) -> str:
        return f"{self.declaration.registry}[{name}]"

    def snapshot(self, tx: Transaction) -> None:
        table = self.registry.module_dict
        self._entries = {n: tx.snapshot(table, n, self._label(n)) for n in self.declaration.names}

    def install(self, tx: Transaction) -> None:
        decl = self.declaration
        if decl.module in sys.modules:
            # Its registrations ran already (or were rolled back): reinstate the module's own
            # objects under the declared names, as the forced import did the first time.
            module = sys.modules[decl.module]
            found = {n: vars(module).get(n, MISSING) for n in decl.names}
        else:
            hook = _forcing(self.registry._register_module, frozenset(decl.names))
            label = f"{decl.registry}._register_module"
            with tx.temporarily(self.registry, "_register_module", hook, label):
                import_module(decl.module)
            found = {n: self.registry.module_dict.get(n, MISSING) for n in decl.names}
        for name, value in found.items():
            if value is not MISSING:
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
    if decl.module in sys.modules:
        override.checks.append(
            Check(
                "registry.module",
                WARNING,
                f"{decl.module!r} is already imported: its own objects "
                "are installed under the declared names",
            )
        )
    override.registry = registry
    return override
