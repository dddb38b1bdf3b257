"""load_config: read a v1 YAML OptimizationConfig, expand ``extends``, build the data model.

``extends`` entries are either file paths (anything ending in ``.yaml``/``.yml`` or containing a
``/``), relative to the file that names them, or config IDs (``metadata.id``, TurboPhysAI's
form) looked up among the YAML files next to the referring file and in the directories of
``TURBO_PHYSAI_CONFIG_PATH``, then among the configs shipped with the built-in catalogs
(:func:`shipped`; a file of the user's with the same ID wins). Parents are merged in the order
listed, then the file itself on top (rules in :func:`_merge` and docs/config.md). A cycle is an
error that shows the chain.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import marks
from .model import ConfigError, GroupSelection, OptimizationConfig, Trust
from .schema import validate

CONFIG_PATH_ENV = "TURBO_PHYSAI_CONFIG_PATH"
#: Configs shipped with the built-in catalogs (package data).
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "catalogs" / "configs"


def load_config(path: str | os.PathLike[str]) -> OptimizationConfig:
    """Load a v1 YAML config. Errors are ConfigError naming file:line and the key."""
    data, sources = _resolve(Path(path).resolve(), (), str(path))
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
        str(path),
        tuple(data["catalogs"]),
        tuple(sources),
    )


def _resolve(path: Path, chain: tuple[str, ...], via: str) -> tuple[dict[str, Any], list[str]]:
    if str(path) in chain:
        raise ConfigError(f"{via}: extends cycle: {' -> '.join((*chain, str(path)))}")
    data = validate(marks.read(path), str(path))
    merged: dict[str, Any] = _empty()
    sources: list[str] = []
    for entry, line in data["extends"]:
        parent = _locate(entry, path, line)
        parent_data, parent_sources = _resolve(parent, (*chain, str(path)), f"{path}:{line}")
        merged = _merge(merged, parent_data)
        sources += [s for s in parent_sources if s not in sources]
    return _merge(merged, data), [*sources, str(path)]


def _empty() -> dict[str, Any]:
    return {"metadata": {}, "model": {}, "catalogs": [], "compatibility": {}, "groups": []}


def _locate(entry: str, referrer: Path, line: int) -> Path:
    where = f"{referrer}:{line}: extends: {entry!r}"
    if entry.endswith((".yaml", ".yml")) or "/" in entry or os.sep in entry:
        candidate = (referrer.parent / entry).resolve()
        if not candidate.is_file():
            raise ConfigError(f"{where}: no such file {candidate}")
        return candidate
    dirs = [referrer.parent] + [
        Path(d) for d in os.environ.get(CONFIG_PATH_ENV, "").split(os.pathsep) if d
    ]
    found = _with_id(entry, dirs)
    if len(found) > 1:
        raise ConfigError(f"{where}: config ID is declared by both {found[0]} and {found[1]}")
    if not found:
        found = _with_id(entry, [SHIPPED_DIR])
    if not found:
        raise ConfigError(
            f"{where}: no config with metadata.id {entry!r} in "
            f"{', '.join(str(d) for d in dirs)} or among the shipped configs "
            f"({', '.join(sorted(shipped())) or 'none'})"
        )
    return found[0]


def _with_id(config_id: str, dirs: list[Path]) -> list[Path]:
    found: list[Path] = []
    for directory in dirs:
        for candidate in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
            if candidate.resolve() not in found and _config_id(candidate) == config_id:
                found.append(candidate.resolve())
    return found


def shipped() -> dict[str, Path]:
    """The configs shipped with the built-in catalogs, by ``metadata.id``: usable in
    ``extends`` by ID, or loaded directly with ``load_config(shipped()[id])``."""
    files = sorted([*SHIPPED_DIR.glob("*.yaml"), *SHIPPED_DIR.glob("*.yml")])
    return {config_id: path for path in files if (config_id := _config_id(path)) is not None}


def _config_id(path: Path) -> Any:
    # Unrelated or broken YAML files next to a config must not break ID lookup.
    try:
        raw = marks.read(path)
    except ConfigError:
        return None
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    return meta.get("id") if isinstance(meta, dict) else None


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
