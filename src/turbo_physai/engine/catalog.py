"""The table of declared groups that configs and group IDs refer to.

One group ID, one group. When catalogs disagree (a user's catalog declares an ID a built-in one
also declares, say TurboPhysAI's catalog ported verbatim), the rule is: **the catalog the config
names wins**. Discovery registers every declaration (``duplicates="keep"``) and, for each check
or apply, calls :meth:`GroupRegistry.choose` with the catalogs the config names in
``optimization_modules`` (a catalog that is not installed takes part only while a config names
it): exactly one of them declares the ID -> its group is used, and the
group's report says so (``catalog.choice``, a warning); none or several -> the first registered
(built-in catalogs register first) stays and the group is blocked with ``catalog.duplicate``,
naming every catalog, until the config names one. Other groups are unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable
from dataclasses import replace as dc_replace

from .. import _core
from .declarations import DeclarationError, Group


def planner_node(group: Group) -> _core.GroupNode:
    return _core.GroupNode(
        group.id, group.import_compat, list(group.depends_on), list(group.writes)
    )


class GroupRegistry:
    """Groups by ID in declaration order; IDs declared by several catalogs, see module doc."""

    def __init__(self) -> None:
        self._groups: dict[str, Group] = {}
        #: Every declaration of an ID that more than one catalog declares, registration order.
        self._declared: dict[str, list[Group]] = {}
        #: ID -> (chosen source or None when ambiguous, every declaring source).
        self._choices: dict[str, tuple[str | None, tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def register(
        self, *groups: Group, source: str = "<unknown>", duplicates: str = "error"
    ) -> None:
        """Add ``groups`` declared by ``source``. An ID already declared by another catalog
        raises DeclarationError naming both, or with ``duplicates="keep"`` is kept for
        :meth:`choose`."""
        with self._lock:
            staged = dict(self._groups)
            declared = {k: list(v) for k, v in self._declared.items()}
            for g in groups:
                if not isinstance(g, Group):
                    raise DeclarationError(f"{source}: {g!r} is not a Group (use group(...))")
                g = dc_replace(g, source=source)
                first = staged.get(g.id)
                if first is None:
                    staged[g.id] = g
                elif duplicates == "keep" and first.source != source:
                    declared.setdefault(g.id, [first]).append(g)
                else:
                    raise DeclarationError(
                        f"group {g.id!r} is declared by both {first.source!r} and {source!r}"
                    )
            self._groups, self._declared = staged, declared

    def choose(self, named: Collection[str], installed: Collection[str]) -> None:
        """For IDs several catalogs declare: use the one of the ``named`` catalogs (module
        paths) that declares it, else the first registered, marked ambiguous. Catalogs that
        are neither installed nor named (trusted by an earlier config) take no part."""
        with self._lock:
            choices = {}
            for gid, declared in self._declared.items():
                groups = [g for g in declared if g.source in installed or g.source in named]
                picked = [g for g in groups if g.source in named]
                active = picked[0] if len(picked) == 1 else groups[0]
                self._groups[gid] = active
                if len(groups) > 1:
                    sources = tuple(g.source for g in groups)
                    choices[gid] = (active.source if len(picked) == 1 else None, sources)
            self._choices = choices

    def choice(self, group_id: str) -> tuple[str | None, tuple[str, ...]] | None:
        """(chosen catalog or None when ambiguous, all declaring catalogs) for an ID several
        catalogs declare; None for an ID only one declares."""
        return self._choices.get(group_id)

    def unregister(self, group_id: str) -> None:
        with self._lock:
            self._groups.pop(group_id)
            self._declared.pop(group_id, None)
            self._choices.pop(group_id, None)

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
