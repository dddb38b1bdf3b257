"""The OptimizationConfig data model: plain, immutable data that the engine reads.

The engine reads ``config.groups`` and, per selection, ``id``, ``enabled``, ``options`` and
``trust``. Everything else (metadata, model, compatibility, catalogs) is carried for the checks
in :mod:`turbo_physai.config.checks`, for the CLI and for writing the config back out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "turbophysai/optimization-config/v1"
KIND = "OptimizationConfig"


class ConfigError(ValueError):
    """A config file is malformed; the message names the file:line and the key."""


@dataclass(frozen=True)
class Trust:
    """Recorded evidence per target path: a target whose current hashes match neither of its
    lists fails ``source.identity``. A group with no evidence at all skips that check."""

    source_hashes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ast_hashes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.source_hashes or self.ast_hashes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_hashes": {t: list(h) for t, h in self.source_hashes.items()},
            "ast_hashes": {t: list(h) for t, h in self.ast_hashes.items()},
        }


@dataclass(frozen=True)
class GroupSelection:
    id: str
    enabled: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    trust: Trust = Trust()

    def __post_init__(self) -> None:
        # Programmatic selections get the same JSON rule the YAML loader enforces with lines.
        problem = json_problem(self.options)
        if problem:
            raise ConfigError(f"options of group {self.id!r} are not JSON values: {problem}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "enabled": self.enabled,
            "options": dict(self.options),
            "trust": self.trust.to_dict(),
        }


@dataclass(frozen=True)
class OptimizationConfig:
    groups: tuple[GroupSelection, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] | None = None
    compatibility: Mapping[str, Any] = field(default_factory=dict)
    path: str | None = None
    #: ``optimization_modules``: catalogs (module or entry-point names) the groups come from.
    catalogs: tuple[str, ...] = ()
    #: Every file this config was merged from, parents first (``extends`` expanded).
    sources: tuple[str, ...] = ()

    @classmethod
    def for_groups(cls, *ids: str, **options: Mapping[str, Any]) -> OptimizationConfig:
        """Programmatic config: ``OptimizationConfig.for_groups("a", "b")``."""
        return cls(tuple(GroupSelection(i, options=options.get(i, {})) for i in ids))

    def group(self, group_id: str) -> GroupSelection | None:
        return next((g for g in self.groups if g.id == group_id), None)

    def to_dict(self) -> dict[str, Any]:
        """The v1 document, ``extends`` already expanded (what ``show`` prints and the
        generator writes)."""
        out: dict[str, Any] = {
            "schema_version": SCHEMA,
            "kind": KIND,
            "metadata": dict(self.metadata),
        }
        if self.model:
            out["model"] = dict(self.model)
        if self.catalogs:
            out["optimization_modules"] = list(self.catalogs)
        if self.compatibility:
            out["compatibility"] = json.loads(json.dumps(self.compatibility))
        out["optimization_groups"] = [g.to_dict() for g in self.groups]
        return out


def json_problem(value: Any, where: str = "") -> str | None:
    """Why ``value`` is not plain JSON data (strings as keys, finite numbers), or None."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where or 'value'}: {value} is not finite"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where or 'mapping'}: key {key!r} is not a string"
            problem = json_problem(item, f"{where}.{key}" if where else key)
            if problem:
                return problem
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            problem = json_problem(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    return f"{where or 'value'}: {type(value).__name__} is not a JSON value"
