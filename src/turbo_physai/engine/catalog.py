"""The table of declared groups that configs and group IDs refer to."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import replace as dc_replace

from .. import _core
from .declarations import DeclarationError, Group


def planner_node(group: Group) -> _core.GroupNode:
    return _core.GroupNode(
        group.id, group.import_compat, list(group.depends_on), list(group.writes)
    )


class GroupRegistry:
    """Groups by ID in declaration order. Duplicate IDs are an error naming both sources."""

    def __init__(self) -> None:
        self._groups: dict[str, Group] = {}
        self._lock = threading.Lock()

    def register(self, *groups: Group, source: str = "<unknown>") -> None:
        with self._lock:
            staged = dict(self._groups)
            for g in groups:
                if not isinstance(g, Group):
                    raise DeclarationError(f"{source}: {g!r} is not a Group (use group(...))")
                if g.id in staged:
                    raise DeclarationError(
                        f"group {g.id!r} is declared by both {staged[g.id].source!r} and {source!r}"
                    )
                staged[g.id] = dc_replace(g, source=source)
            self._groups = staged

    def unregister(self, group_id: str) -> None:
        with self._lock:
            self._groups.pop(group_id)

    def validate(self) -> None:
        """Raise for unknown dependencies and phase violations across everything registered."""
        try:
            _core.validate_catalog([planner_node(g) for g in self.groups()])
        except _core.PlanError as err:
            raise DeclarationError(str(err)) from err

    def get(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def groups(self) -> list[Group]:
        return list(self._groups.values())

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._groups

    def __iter__(self) -> Iterable[Group]:
        return iter(self.groups())


#: Groups of the installed catalogs; check()/apply() resolve group IDs here.
registry = GroupRegistry()
