"""What a group's compatibility_check sees and returns."""

from __future__ import annotations

import copy
import importlib.metadata
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class CompatibilityResult:
    """Returned by a compatibility_check: ``compatible=False`` blocks the group (force cannot).
    ``code`` is the block's reason code in the report (``platform.unsupported`` ...)."""

    compatible: bool
    expected: Any = None
    actual: Any = None
    reason: str = ""
    code: str = "compatibility.incompatible"


@dataclass(frozen=True)
class TargetInfo:
    """A path the group writes, or whose code it takes over (``replace_stored``'s function)."""

    path: str
    kind: str  # the declaration kind: replace, wrap, replace_import, ...


class CompatibilityContext:
    """Read-only view for a compatibility_check: package versions, options, environment."""

    def __init__(
        self,
        group_id: str,
        options: Mapping[str, Any],
        targets: tuple[TargetInfo, ...],
        reads: tuple[str, ...] = (),
    ):
        self._group_id = group_id
        self._reads = reads
        self._options = MappingProxyType(copy.deepcopy(dict(options)))
        self._environment = MappingProxyType(dict(os.environ))
        self._targets = targets

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def options(self) -> Mapping[str, Any]:
        return self._options

    @property
    def environment(self) -> Mapping[str, str]:
        return self._environment

    @property
    def targets(self) -> tuple[TargetInfo, ...]:
        return self._targets

    @property
    def reads(self) -> tuple[str, ...]:
        """Paths of code the group relies on as it is, neither written nor replaced
        (``replace_stored``: the ``__init__`` storing the function, its callers)."""
        return self._reads

    @staticmethod
    def package_version(name: str) -> str | None:
        """Installed distribution version, or None when the package is not installed."""
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
