"""Declarations: what optimization developers write in catalogs.

Everything here is plain data over import-path strings: declaring never imports model code. The
engine resolves the paths at check/apply time. Structural mistakes that can be seen without
importing anything raise :class:`DeclarationError` here, naming the group and the declaration.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class DeclarationError(ValueError):
    """A group or declaration is malformed (raised at declaration or registration time)."""


def _check_path(value: object, what: str, decl: str) -> str:
    if not isinstance(value, str) or not _PATH.match(value):
        raise DeclarationError(f"{decl}: {what} must be a dotted import path, got {value!r}")
    return value


@dataclass(frozen=True)
class Replace:
    """The object at ``target`` is replaced by the object at ``replacement``."""

    target: str
    replacement: str
    aliases: tuple[str, ...] = ()
    runtime_condition: str | None = None
    #: A target some releases of the host library lack (and need no patch there): where it does
    #: not resolve, the declaration patches nothing instead of blocking its group.
    optional: bool = False

    kind = "replace"
    import_compat = False

    def __post_init__(self) -> None:
        _check_path(self.target, "target", self.describe())
        _check_path(self.replacement, "replacement", self.describe())
        object.__setattr__(self, "aliases", _paths(self.aliases, "aliases", self.describe()))
        if self.target in self.aliases:
            raise DeclarationError(f"{self.describe()}: the target is listed among its aliases")
        if self.runtime_condition is not None:
            _check_path(self.runtime_condition, "runtime_condition", self.describe())

    def describe(self) -> str:
        return f"{self.kind}({self.target!r})"

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.target, *self.aliases)


@dataclass(frozen=True)
class Wrap(Replace):
    """``replacement`` is a factory ``factory(original, options) -> new_object``."""

    kind = "wrap"


@dataclass(frozen=True)
class ReplaceStored:
    """Instances of the class ``owner`` store the function ``original`` in their own
    ``attribute`` when they are built (``self.<attribute> = original`` in ``__init__``); while
    applied, those that still hold it read ``replacement`` there instead, whenever they were
    built. Nothing is written into an instance: a data descriptor on ``owner`` answers the read,
    and rollback removes it."""

    owner: str
    attribute: str
    original: str
    replacement: str
    runtime_condition: str | None = None
    #: Code that calls the stored function (e.g. ``owner.forward``): not written, but relied on
    #: (compatibility checks see it in ``context.reads``, with ``owner.__init__``).
    callers: tuple[str, ...] = ()

    kind = "replace_stored"
    import_compat = False

    def __post_init__(self) -> None:
        where = self.describe()
        for what in ("owner", "original", "replacement"):
            _check_path(getattr(self, what), what, where)
        if not isinstance(self.attribute, str) or not self.attribute.isidentifier():
            raise DeclarationError(f"{where}: attribute must be a name, got {self.attribute!r}")
        if self.runtime_condition is not None:
            _check_path(self.runtime_condition, "runtime_condition", where)
        object.__setattr__(self, "callers", _paths(self.callers, "callers", where))

    def describe(self) -> str:
        return f"replace_stored({self.owner!r}, {self.attribute!r})"

    @property
    def target(self) -> str:
        return f"{self.owner}.{self.attribute}"

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.target,)

    @property
    def replaces(self) -> tuple[str, ...]:
        """Code whose work the replacement takes over without its path being written."""
        return (self.original,)

    @property
    def reads(self) -> tuple[str, ...]:
        """Code relied on as it is: the ``__init__`` storing the function, and its callers."""
        return (f"{self.owner}.__init__", *self.callers)


@dataclass(frozen=True)
class ReplaceImport:
    """The module ``replacement`` is registered in ``sys.modules`` under ``target``."""

    target: str
    replacement: str

    kind = "replace_import"
    import_compat = True

    def __post_init__(self) -> None:
        _check_path(self.target, "target", self.describe())
        _check_path(self.replacement, "replacement", self.describe())

    def describe(self) -> str:
        return f"replace_import({self.target!r})"

    @property
    def writes(self) -> tuple[str, ...]:
        return (f"sys.modules[{self.target}]",)


@dataclass(frozen=True)
class ImportAlias:
    """Adds the name ``alias`` in ``module`` for the existing object ``module.source``."""

    module: str
    source: str
    alias: str

    kind = "import_alias"
    import_compat = True

    def __post_init__(self) -> None:
        _check_path(self.module, "module", self.describe())
        for what in ("source", "alias"):
            value = getattr(self, what)
            if not isinstance(value, str) or not value.isidentifier():
                raise DeclarationError(f"{self.describe()}: {what} must be a name, got {value!r}")

    def describe(self) -> str:
        return f"import_alias({self.module!r}, {self.alias!r})"

    @property
    def writes(self) -> tuple[str, ...]:
        return (f"{self.module}.{self.alias}",)


@dataclass(frozen=True)
class OptionalImport:
    """Installs an empty placeholder module, only if the real module cannot be imported."""

    module: str

    kind = "optional_import"
    import_compat = True

    def __post_init__(self) -> None:
        _check_path(self.module, "module", self.describe())

    def describe(self) -> str:
        return f"optional_import({self.module!r})"

    @property
    def writes(self) -> tuple[str, ...]:
        return (f"sys.modules[{self.module}]",)


@dataclass(frozen=True)
class RegistryOverride:
    """While ``module`` is imported, ``names`` may override entries of ``registry``."""

    module: str
    registry: str
    names: tuple[str, ...]

    kind = "registry_override"
    import_compat = True

    def __post_init__(self) -> None:
        _check_path(self.module, "module", self.describe())
        _check_path(self.registry, "registry", self.describe())
        names = (self.names,) if isinstance(self.names, str) else tuple(self.names)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise DeclarationError(f"{self.describe()}: names must be non-empty strings")
        object.__setattr__(self, "names", names)

    def describe(self) -> str:
        return f"registry_override({self.registry!r}, module={self.module!r})"

    @property
    def writes(self) -> tuple[str, ...]:
        return tuple(f"{self.registry}[{name}]" for name in self.names)


Declaration = (
    Replace | Wrap | ReplaceStored | ReplaceImport | ImportAlias | OptionalImport | RegistryOverride
)


@dataclass(frozen=True)
class Group:
    """One complete optimization: selected, checked, applied and rolled back as a unit."""

    id: str
    declarations: tuple[Declaration, ...]
    depends_on: tuple[str, ...] = ()
    compatibility_check: str | None = None
    source: str = field(default="<unregistered>", compare=False)

    @property
    def import_compat(self) -> bool:
        return self.declarations[0].import_compat

    @property
    def writes(self) -> tuple[str, ...]:
        return tuple(path for decl in self.declarations for path in decl.writes)


def _paths(values: Iterable[str] | str, what: str, decl: str) -> tuple[str, ...]:
    if isinstance(values, str):
        values = (values,)
    return tuple(_check_path(v, what, decl) for v in values)


def group(
    group_id: str,
    *declarations: Declaration,
    depends_on: Iterable[str] | str = (),
    compatibility_check: str | None = None,
) -> Group:
    """Declare a group. Raises DeclarationError naming the group and the declaration at fault."""
    if not isinstance(group_id, str) or not group_id.strip():
        raise DeclarationError(f"group ID must be a non-empty string, got {group_id!r}")
    where = f"group {group_id!r}"
    if not declarations:
        raise DeclarationError(f"{where} has no declarations")
    for decl in declarations:
        if not isinstance(decl, Declaration.__args__):  # type: ignore[attr-defined]
            raise DeclarationError(f"{where}: {decl!r} is not a declaration")
    compat = [d for d in declarations if d.import_compat]
    regular = [d for d in declarations if not d.import_compat]
    if compat and regular:
        raise DeclarationError(
            f"{where} mixes import-compatibility declaration {compat[0].describe()} with "
            f"{regular[0].describe()}; put them in separate groups"
        )
    seen: dict[str, str] = {}
    for decl in declarations:
        for path in decl.writes:
            if path in seen:
                raise DeclarationError(
                    f"{where}: {decl.describe()} writes {path!r}, already written by {seen[path]}"
                )
            seen[path] = decl.describe()
    deps = _paths(depends_on, "depends_on", where) if depends_on else ()
    if group_id in deps:
        raise DeclarationError(f"{where} depends on itself")
    if compatibility_check is not None:
        _check_path(compatibility_check, "compatibility_check", where)
    return Group(group_id, tuple(declarations), deps, compatibility_check)


def replace(
    target: str,
    replacement: str,
    aliases: Iterable[str] | str = (),
    runtime_condition: str | None = None,
    optional: bool = False,
) -> Replace:
    """Replace the object at ``target`` with the object at ``replacement``."""
    return Replace(target, replacement, aliases, runtime_condition, optional)  # type: ignore[arg-type]


def wrap(
    target: str,
    replacement: str,
    aliases: Iterable[str] | str = (),
    runtime_condition: str | None = None,
    optional: bool = False,
) -> Wrap:
    """Install ``replacement(original, options)`` at ``target``."""
    return Wrap(target, replacement, aliases, runtime_condition, optional)  # type: ignore[arg-type]


def replace_stored(
    owner: str,
    attribute: str,
    original: str,
    replacement: str,
    runtime_condition: str | None = None,
    callers: Iterable[str] | str = (),
) -> ReplaceStored:
    """Instances of ``owner`` that stored ``original`` at ``attribute`` read ``replacement``."""
    return ReplaceStored(owner, attribute, original, replacement, runtime_condition, callers)  # type: ignore[arg-type]


def replace_import(target: str, replacement: str) -> ReplaceImport:
    """Register module ``replacement`` under the module path ``target``."""
    return ReplaceImport(target, replacement)


def import_alias(module: str, source: str, alias: str) -> ImportAlias:
    return ImportAlias(module, source, alias)


def optional_import(module: str) -> OptionalImport:
    return OptionalImport(module)


def registry_override(module: str, registry: str, names: Iterable[str] | str) -> RegistryOverride:
    return RegistryOverride(module, registry, names)  # type: ignore[arg-type]
