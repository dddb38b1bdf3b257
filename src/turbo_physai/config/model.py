"""The OptimizationConfig data model (plain, immutable data) and its YAML loader."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "turbophysai/optimization-config/v1"


class ConfigError(ValueError):
    """A config file is malformed; the message names the file and the key."""


@dataclass(frozen=True)
class Trust:
    """Recorded evidence: a target matching neither list fails ``source.identity``."""

    source_hashes: tuple[str, ...] = ()
    ast_hashes: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.source_hashes or self.ast_hashes)


@dataclass(frozen=True)
class GroupSelection:
    id: str
    enabled: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    trust: Trust = Trust()

    def __post_init__(self) -> None:
        try:
            json.dumps(dict(self.options))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"options of group {self.id!r} are not JSON values: {err}") from err


@dataclass(frozen=True)
class OptimizationConfig:
    groups: tuple[GroupSelection, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] | None = None
    compatibility: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None

    @classmethod
    def for_groups(cls, *ids: str, **options: Mapping[str, Any]) -> OptimizationConfig:
        """Programmatic config: ``OptimizationConfig.for_groups("a", "b")``."""
        return cls(tuple(GroupSelection(i, options=options.get(i, {})) for i in ids))


def load_config(path: str | os.PathLike[str]) -> OptimizationConfig:
    """Load a v1 YAML config. Errors name the file and the offending key."""
    import yaml

    where = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{where}: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    if data.get("schema_version") != SCHEMA:
        raise ConfigError(f"{where}: schema_version must be {SCHEMA!r}")
    allowed = {
        "schema_version",
        "kind",
        "metadata",
        "model",
        "compatibility",
        "optimization_groups",
    }
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r}")
    selections = []
    for i, entry in enumerate(data.get("optimization_groups") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ConfigError(f"{where}: optimization_groups[{i}] needs a string 'id'")
        unknown = set(entry) - {"id", "enabled", "options", "trust"}
        if unknown:
            raise ConfigError(
                f"{where}: optimization_groups[{i}]: unknown key {sorted(unknown)[0]!r}"
            )
        trust = entry.get("trust") or {}
        selections.append(
            GroupSelection(
                entry["id"],
                bool(entry.get("enabled", True)),
                entry.get("options") or {},
                Trust(tuple(trust.get("source_hashes", ())), tuple(trust.get("ast_hashes", ()))),
            )
        )
    return OptimizationConfig(
        tuple(selections),
        data.get("metadata") or {},
        data.get("model"),
        data.get("compatibility") or {},
        where,
    )
