"""Shared pieces of the mechanisms: the preparation context, the prepared patch, the per-group
transaction over the C++ journal."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...config import Trust
from ..report import FAIL, Check, GroupReport


@dataclass
class PrepareContext:
    group_id: str
    options: Mapping[str, Any]
    trust: Trust
    report: GroupReport


class Transaction:
    """All writes of one group, recorded in the shared journal under the group's ID."""

    def __init__(self, journal: Any, group_id: str, report: GroupReport):
        self._journal = journal
        self._group = group_id
        self._report = report

    def snapshot(self, owner: Any, name: str, label: str) -> int:
        return self._journal.snapshot(owner, name, label, self._group)

    def set(self, entry: int, value: Any, label: str) -> None:
        self._journal.install(entry, value)
        self._report.targets.append(label)

    @contextlib.contextmanager
    def temporarily(self, owner: Any, name: str, value: Any, label: str) -> Iterator[None]:
        """Install ``value`` for the duration of the block only (e.g. an import-time hook)."""
        scope = f"{self._group}#{label}"
        entry = self._journal.snapshot(owner, name, label, scope)
        try:
            self._journal.install(entry, value)
            yield
        finally:
            outcome = self._journal.restore_group(scope)
            if outcome["failed"] or outcome["drifted"]:
                raise RuntimeError(f"could not remove temporary {label}: {outcome}")


@dataclass
class Prepared:
    """A resolved declaration: its checks, and (when they pass) how to snapshot and install."""

    declaration: Any
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self.checks)

    # A declaration that resolved to "nothing to write" (or was blocked) keeps these no-ops.
    def snapshot(self, tx: Transaction) -> None:
        """Record every location this declaration will write. Runs before any install."""

    def install(self, tx: Transaction) -> None:
        """Write the new objects at the snapshotted locations."""
