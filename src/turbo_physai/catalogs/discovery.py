"""Find and register catalogs: built-in ones and the entry-point group ``turbo_physai.catalogs``.

A catalog module declares groups either as ``GROUPS = (...)`` or as module-level Group objects
(in definition order). An entry point's value is the catalog module (``pkg.catalog``).

Security: a config is data. Its ``optimization_modules`` may only name installed catalogs (by
entry-point name, module path or an alias in ``ALIASES``); anything else would make us import
arbitrary code, so it is refused unless the caller passes ``trust=True`` (``--trust-config``).

A group ID that several catalogs declare goes to the catalog the config names (see
:mod:`turbo_physai.engine.catalog`): every load ends with ``GroupRegistry.choose``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import sys
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

from ..config import ConfigError
from ..engine.catalog import GroupRegistry, registry
from ..engine.declarations import Group
from . import ALIASES, BUILTIN

ENTRY_POINT_GROUP = "turbo_physai.catalogs"


class CatalogError(ConfigError):
    """A catalog cannot be loaded, or a config names a catalog that is not installed."""


@dataclass(frozen=True)
class CatalogSource:
    name: str  # entry-point name, or the module path for built-in and trusted catalogs
    module: str

    @property
    def label(self) -> str:
        return self.module if self.name == self.module else f"{self.name} ({self.module})"


def installed() -> list[CatalogSource]:
    return list(_installed(tuple(sys.path)))


# Scanning distributions for entry points costs tens of milliseconds and check/apply ask on
# every call (A/B loops apply hundreds of times); the answer changes only with sys.path.
@functools.lru_cache(maxsize=8)
def _installed(path: tuple[str, ...]) -> tuple[CatalogSource, ...]:
    found = [CatalogSource(m, m) for m in BUILTIN]
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.append(CatalogSource(ep.name, ep.module))
    return tuple(found)


_loaded: weakref.WeakKeyDictionary[GroupRegistry, set[str]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def load(names: Iterable[str] = (), *, trust: bool = False, into: GroupRegistry = registry) -> None:
    """Register every installed catalog (once per registry), then the catalogs ``names`` (a
    config's ``optimization_modules``) that are not installed, only when ``trust`` is set."""
    names = list(names)
    sources = installed()
    known = {s.name for s in sources} | {s.module for s in sources} | set(ALIASES)
    strangers = [n for n in names if n not in known]
    if strangers and not trust:
        raise CatalogError(
            f"the config names {', '.join(map(repr, strangers))}, which "
            f"{'is' if len(strangers) == 1 else 'are'} not an installed catalog; importing it "
            "would run code the config chose. Install it as a catalog (entry point "
            f"{ENTRY_POINT_GROUP!r}) or pass --trust-config / trust=True"
        )
    with _lock:
        done = _loaded.setdefault(into, set())
        todo = [
            s for s in sources + [CatalogSource(n, n) for n in strangers] if s.module not in done
        ]
        for source in todo:
            into.register(*groups_of(_import(source)), source=source.module, duplicates="keep")
            done.add(source.module)
        if todo:
            into.validate()
        into.choose(named(names, sources), {s.module for s in sources})


def named(names: Iterable[str], sources: Iterable[CatalogSource]) -> set[str]:
    """The catalog modules that ``names`` (a config's ``optimization_modules``) stand for."""
    by_name = {s.name: s.module for s in sources}
    out: set[str] = set()
    for name in names:
        out.update(ALIASES.get(name, (by_name.get(name, name),)))
    return out


def groups_of(module: ModuleType) -> list[Group]:
    declared = getattr(module, "GROUPS", None)
    if declared is None:
        return [v for v in vars(module).values() if isinstance(v, Group)]
    return list(declared)


def _import(source: CatalogSource) -> ModuleType:
    try:
        return importlib.import_module(source.module)
    except Exception as err:  # a broken catalog must say which one, whatever it raised
        raise CatalogError(
            f"catalog {source.label} cannot be imported: {type(err).__name__}: {err}"
        ) from err
