"""load_config: read a v1 YAML OptimizationConfig, expand ``extends``, build the data model.

``extends`` entries are either file paths (anything ending in ``.yaml``/``.yml`` or containing a
``/``), relative to the file that names them, or config IDs (``metadata.id``, TurboPhysAI's
form) found as :mod:`.lookup` describes (next to the file, ``TURBO_PHYSAI_CONFIG_PATH``,
TurboPhysAI's ``optimizations/**/configs/optimization.yaml`` layout, then the shipped configs).
Parents are merged in the order listed, then the file itself on top (rules in :func:`_merge`
and docs/config.md). A cycle is an error that shows the chain. :data:`LIMITS` bound how many
files one load may merge and how deep ``extends`` may chain. The config itself may be named by
ID too (:func:`resolve`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import lookup, marks
from .lookup import CONFIG_PATH_ENV, SHIPPED_DIR, shipped
from .model import ConfigError, GroupSelection, OptimizationConfig, Trust
from .schema import validate

__all__ = [
    "CONFIG_PATH_ENV",
    "LIMITS",
    "SHIPPED_DIR",
    "config_ids",
    "load_config",
    "resolve",
    "shipped",
]

#: Per load_config call: files merged through ``extends``, and the longest parent chain.
LIMITS = {"files": 100, "chain": 16}


def load_config(path: str | os.PathLike[str]) -> OptimizationConfig:
    """Load a v1 YAML config, named by file or by ID (:func:`resolve`). Errors are ConfigError
    naming file:line and the key."""
    file = resolve(path)
    shown = str(path) if file == Path(path) else str(file)
    data, sources = _Load().resolve(file.absolute(), (), shown)
    groups = tuple(
        GroupSelection(
            g["id"],
            g.get("enabled", True),
            g.get("options", {}),
            Trust(
                {t: tuple(h) for t, h in g.get("trust", {}).get("source_hashes", {}).items()},
                {t: tuple(h) for t, h in g.get("trust", {}).get("ast_hashes", {}).items()},
            ),
        )
        for g in data["groups"]
    )
    return OptimizationConfig(
        groups,
        data["metadata"],
        data["model"] or None,
        data["compatibility"],
        shown,
        tuple(data["catalogs"]),
        tuple(sources),
    )


class _Load:
    """One load: the files read so far and the ID index, so each file is parsed once."""

    def __init__(self) -> None:
        self.index = lookup.Index()
        self.files = 0

    def resolve(
        self, path: Path, chain: tuple[str, ...], via: str
    ) -> tuple[dict[str, Any], list[str]]:
        path = _real(path)
        if str(path) in chain:
            raise ConfigError(f"{via}: extends cycle: {' -> '.join((*chain, str(path)))}")
        if len(chain) >= LIMITS["chain"]:
            raise ConfigError(f"{via}: extends chains more than {LIMITS['chain']} files deep")
        self.files += 1
        if self.files > LIMITS["files"]:
            raise ConfigError(f"{via}: extends merges more than {LIMITS['files']} files")
        data = validate(marks.read(path), str(path))
        merged: dict[str, Any] = _empty()
        sources: list[str] = []
        for entry, line in data["extends"]:
            parent = self.locate(entry, path, line)
            parent_data, parent_sources = self.resolve(
                parent, (*chain, str(path)), f"{path}:{line}"
            )
            merged = _merge(merged, parent_data)
            sources += [s for s in parent_sources if s not in sources]
        return _merge(merged, data), [*sources, str(path)]

    def locate(self, entry: str, referrer: Path, line: int) -> Path:
        where = f"{referrer}:{line}: extends: {entry!r}"
        if _is_path(entry):
            candidate = referrer.parent / entry
            if not candidate.is_file():
                raise ConfigError(f"{where}: no such file {candidate}")
            return candidate
        found = self.index.find(entry, referrer)
        if len(found) > 1:
            raise ConfigError(f"{where}: config ID is declared by both {found[0]} and {found[1]}")
        if not found and entry in shipped():
            found = [shipped()[entry]]
        if not found:
            raise ConfigError(f"{where}: {self._not_found(entry, referrer)}")
        return found[0]

    def _not_found(self, entry: str, referrer: Path) -> str:
        places = [str(referrer.parent), *map(str, lookup.search_path())]
        root = lookup.layout_root(referrer)
        if root is not None:
            places.append(f"{root}/**/configs/optimization.yaml")
        message = (
            f"no config with metadata.id {entry!r} in {', '.join(places)} or among the shipped "
            f"configs ({', '.join(sorted(shipped())) or 'none'})"
        )
        recipes = self.index.recipes(entry, referrer)
        if recipes:
            message += (
                f"; {recipes[0]} declares it, but recipes are not extends targets: generate the "
                "optimization.yaml from it (turbo-physai generate --recipe)"
            )
        problems = self.index.problems(entry)
        if problems:
            message += f"; a file that could not be read mentions it: {problems[0]}"
        if self.index.truncated:
            message += f" (the search of {self.index.truncated[0]} stopped after "
            message += f"{lookup.SCAN_LIMIT} folders)"
        return message


def resolve(ref: str | os.PathLike[str]) -> Path:
    """The file of a config named by path, or by config ID (``metadata.id``, e.g.
    ``turbo_physai.deformable_detr``): an existing file, or anything that looks like a path, is
    a path; an ID is looked up in the directories of ``TURBO_PHYSAI_CONFIG_PATH``, then among
    the shipped configs (:func:`config_ids`)."""
    name = os.fspath(ref)
    if _is_path(name) or Path(name).is_file():
        return Path(name)
    known = config_ids()
    if name not in known:
        raise ConfigError(
            f"{name!r} is neither a config file nor a config ID; known IDs: "
            f"{', '.join(sorted(known)) or 'none'} ({CONFIG_PATH_ENV} adds directories)"
        )
    return known[name]


def config_ids() -> dict[str, Path]:
    """Every config ID :func:`resolve` finds, with its file: those in the directories of
    ``TURBO_PHYSAI_CONFIG_PATH`` first (the first file of an ID wins), then the shipped ones."""
    index = lookup.Index()
    found: dict[str, Path] = {}
    for directory in lookup.search_path():
        for path in lookup.yaml_files(directory):
            config_id = index.id_of(path)
            if isinstance(config_id, str):
                found.setdefault(config_id, path)
    for config_id, path in shipped().items():
        found.setdefault(config_id, path)
    return found


def _is_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or "/" in name or os.sep in name


def _empty() -> dict[str, Any]:
    return {"metadata": {}, "model": {}, "catalogs": [], "compatibility": {}, "groups": []}


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError) as err:  # RuntimeError: a symlink loop (Python < 3.13)
        raise ConfigError(f"{path}: cannot read: {err}") from None


def _merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """``child`` on top of ``base``. metadata is the child's own; model keys, dependency
    packages, group options and trust targets merge key by key with the child winning;
    commits/backend/repository/allow_dirty and a group's ``enabled`` are replaced when the
    child states them; catalogs and groups keep the order of first appearance."""
    compat = {**base["compatibility"], **child["compatibility"]}
    if "dependencies" in base["compatibility"] or "dependencies" in child["compatibility"]:
        compat["dependencies"] = {
            **base["compatibility"].get("dependencies", {}),
            **child["compatibility"].get("dependencies", {}),
        }
    groups = {g["id"]: g for g in base["groups"]}
    for g in child["groups"]:
        old = groups.get(g["id"])
        groups[g["id"]] = g if old is None else _merge_group(old, g)
    return {
        "metadata": child["metadata"],
        "model": {**base["model"], **child["model"]},
        "catalogs": list(dict.fromkeys([*base["catalogs"], *child["catalogs"]])),
        "compatibility": compat,
        "groups": list(groups.values()),
    }


def _merge_group(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    out = {
        "id": old["id"],
        "provided": old["provided"] | new["provided"],
        "options": {**old.get("options", {}), **new.get("options", {})},
    }
    if "enabled" in new or "enabled" in old:
        out["enabled"] = new.get("enabled", old.get("enabled"))
    trust = {}
    for kind in ("source_hashes", "ast_hashes"):
        trust[kind] = {**old.get("trust", {}).get(kind, {}), **new.get("trust", {}).get(kind, {})}
    out["trust"] = trust
    return out
