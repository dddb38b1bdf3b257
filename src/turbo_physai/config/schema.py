"""Validate one parsed v1 OptimizationConfig file into normalized plain data.

Every error names ``file:line``, the key path (``optimization_groups[2].trust.source_hashes``)
and what was expected. Field set and value shapes follow TurboPhysAI's v1 format, so its
shipped configs load as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .marks import line_of
from .model import KIND, SCHEMA, ConfigError, json_problem

TOP = {
    "schema_version",
    "kind",
    "metadata",
    "model",
    "optimization_modules",
    "extends",
    "compatibility",
    "optimization_groups",
}
METADATA = {"id", "version", "description"}
MODEL = {"name"}
COMPATIBILITY = {"commits", "allow_dirty", "dependencies", "backend", "repository"}
GROUP = {"id", "enabled", "options", "trust"}
TRUST = {"source_hashes", "ast_hashes"}


class Located:
    def __init__(self, where: str):
        self.where = where

    def error(self, container: Any, key: Any, path: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where}:{line_of(container, key)}: {path}: {message}")

    def mapping(self, parent: Any, key: Any, path: str, allowed: set[str]) -> Mapping[str, Any]:
        value = parent[key]
        if not isinstance(value, Mapping):
            raise self.error(parent, key, path, f"expected a mapping, got {_kind(value)}")
        self.known(value, path, allowed)
        return value

    def known(self, value: Mapping[Any, Any], path: str, allowed: set[str]) -> None:
        for k in value:
            if k not in allowed:
                raise self.error(
                    value,
                    k,
                    f"{path}.{k}" if path else str(k),
                    f"unknown key (allowed: {', '.join(sorted(allowed))})",
                )

    def string(self, parent: Any, key: Any, path: str) -> str:
        value = parent[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(parent, key, path, f"expected a non-empty string, got {_kind(value)}")
        return value

    def strings(self, parent: Any, key: Any, path: str, one_allowed: bool) -> list[str]:
        value = parent[key]
        if one_allowed and isinstance(value, str):
            return [self.string(parent, key, path)]
        if not isinstance(value, list):
            want = "a string or a list of strings" if one_allowed else "a list of strings"
            raise self.error(parent, key, path, f"expected {want}, got {_kind(value)}")
        return [self.string(value, i, f"{path}[{i}]") for i in range(len(value))]

    def boolean(self, parent: Any, key: Any, path: str) -> bool:
        if not isinstance(parent[key], bool):
            raise self.error(parent, key, path, f"expected true or false, got {_kind(parent[key])}")
        return parent[key]


def validate(raw: Any, where: str) -> dict[str, Any]:
    """One file -> {metadata, model, catalogs, extends[(entry, line)], compatibility, groups}."""
    f = Located(where)
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}:{line_of(raw, 0) or 1}: expected a mapping at the top level, got {_kind(raw)}"
        )
    f.known(raw, "", TOP)
    for key, expected in (("schema_version", SCHEMA), ("kind", KIND)):
        if raw.get(key) != expected:
            raise f.error(raw, key, key, f"must be {expected!r}, got {raw.get(key)!r}")
    if "metadata" not in raw:
        raise ConfigError(f"{where}:1: metadata: required (with id and version)")
    meta = f.mapping(raw, "metadata", "metadata", METADATA)
    out: dict[str, Any] = {
        "metadata": {},
        "model": {},
        "catalogs": [],
        "extends": [],
        "compatibility": {},
        "groups": [],
    }
    for key in ("id", "version"):
        if key not in meta:
            raise f.error(raw, "metadata", f"metadata.{key}", "required")
    for key in meta:
        out["metadata"][key] = f.string(meta, key, f"metadata.{key}")
    if "model" in raw:
        model = f.mapping(raw, "model", "model", MODEL)
        out["model"] = {k: f.string(model, k, f"model.{k}") for k in model}
    if "optimization_modules" in raw:
        mods = f.strings(raw, "optimization_modules", "optimization_modules", one_allowed=False)
        for i, name in enumerate(mods):
            if name in mods[:i]:
                raise f.error(
                    raw["optimization_modules"],
                    i,
                    f"optimization_modules[{i}]",
                    f"duplicate {name!r}",
                )
        out["catalogs"] = mods
    if "extends" in raw:
        entries = f.strings(raw, "extends", "extends", one_allowed=False)
        out["extends"] = [(e, line_of(raw["extends"], i)) for i, e in enumerate(entries)]
    if "compatibility" in raw:
        out["compatibility"] = _compatibility(f, raw)
    if "optimization_groups" in raw:
        groups = raw["optimization_groups"]
        if not isinstance(groups, list):
            raise f.error(
                raw,
                "optimization_groups",
                "optimization_groups",
                f"expected a list, got {_kind(groups)}",
            )
        seen: dict[str, int] = {}
        for i in range(len(groups)):
            group = _group(f, groups, i)
            if group["id"] in seen:
                raise f.error(
                    groups,
                    i,
                    f"optimization_groups[{i}].id",
                    f"group {group['id']!r} is already selected in item {seen[group['id']]}",
                )
            seen[group["id"]] = i
            out["groups"].append(group)
    return out


def _compatibility(f: Located, raw: Mapping[str, Any]) -> dict[str, Any]:
    compat = f.mapping(raw, "compatibility", "compatibility", COMPATIBILITY)
    out: dict[str, Any] = {}
    for key in ("commits", "backend", "repository"):
        if key in compat:
            out[key] = f.strings(compat, key, f"compatibility.{key}", one_allowed=True)
    if "allow_dirty" in compat:
        out["allow_dirty"] = f.boolean(compat, "allow_dirty", "compatibility.allow_dirty")
    if "dependencies" in compat:
        deps = compat["dependencies"]
        if not isinstance(deps, Mapping):
            raise f.error(
                compat,
                "dependencies",
                "compatibility.dependencies",
                f"expected a mapping of package -> versions, got {_kind(deps)}",
            )
        out["dependencies"] = {}
        for name in deps:
            path = f"compatibility.dependencies.{name}"
            if not isinstance(name, str):
                raise f.error(deps, name, path, "package names are strings")
            accepted = f.strings(deps, name, path, one_allowed=True)
            for spec in accepted:
                if requirement(spec) is None:
                    raise f.error(
                        deps,
                        name,
                        path,
                        f"{spec!r} is neither a version nor a PEP 440 specifier like '>=2.1,<3'",
                    )
            out["dependencies"][name] = accepted
    return out


def requirement(spec: str) -> SpecifierSet | None:
    """A dependency entry: a PEP 440 specifier set ('>=1,<2') or an exact version ('1.7.1')."""
    try:
        if spec.lstrip()[:1] in "<>=!~":
            return SpecifierSet(spec)
        return SpecifierSet(f"=={Version(spec)}")
    except (InvalidSpecifier, InvalidVersion):
        return None


def _group(f: Located, groups: list[Any], i: int) -> dict[str, Any]:
    path = f"optimization_groups[{i}]"
    entry = f.mapping(groups, i, path, GROUP)
    if "id" not in entry:
        raise f.error(groups, i, f"{path}.id", "required")
    out: dict[str, Any] = {"id": f.string(entry, "id", f"{path}.id"), "provided": set(entry)}
    if "enabled" in entry:
        out["enabled"] = f.boolean(entry, "enabled", f"{path}.enabled")
    if "options" in entry:
        options = entry["options"]
        if not isinstance(options, Mapping):
            raise f.error(
                entry, "options", f"{path}.options", f"expected a mapping, got {_kind(options)}"
            )
        problem = json_problem(options)
        if problem:
            key = problem.split(":")[0].split(".")[0].split("[")[0]
            raise f.error(options, key, f"{path}.options", f"not JSON data: {problem}")
        out["options"] = dict(options)
    if "trust" in entry:
        trust = f.mapping(entry, "trust", f"{path}.trust", TRUST)
        out["trust"] = {}
        for kind in trust:
            out["trust"][kind] = _hashes(f, trust, kind, f"{path}.trust.{kind}")
    return out


def _hashes(f: Located, trust: Mapping[str, Any], kind: str, path: str) -> dict[str, list[str]]:
    table = trust[kind]
    if table is None:
        return {}
    if not isinstance(table, Mapping):
        raise f.error(
            trust, kind, path, f"expected a mapping of target path -> hashes, got {_kind(table)}"
        )
    out = {}
    for target in table:
        if not isinstance(target, str):
            raise f.error(table, target, path, f"target {target!r} is not a string")
        # Any string loads (as in TurboPhysAI): check() verifies the formats it can compute
        # and reports the others as unverifiable, a placeholder as a mismatch.
        out[target] = f.strings(table, target, f"{path}.{target}", one_allowed=True)
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"[:80]
