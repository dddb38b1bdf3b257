"""Group transitions other threads see whole: a group appears at once and disappears at once.

Writing a group's locations one by one from Python lets the interpreter hand the GIL to another
thread between two writes (it may switch at any call or loop in the engine's own code), and a
thread already inside one of the group's functions may look up the group's other functions after
the switch. So a transition (a group's install, or rollback of everything) goes in three steps:

1. Gates, in one native step (`Journal.install_many`): every location whose old and new objects
   are both functions (plain, static or class methods, runtime_condition Dispatchers) gets a
   `_core.Dispatcher` whose condition is the group's `_core.Switch`. A gate sends a call to the
   side its thread is already on (the outermost frame running one of the group's codes), else to
   the target side: calls in flight finish on the side they started on, new calls take the target.
2. Drain: wait, with the GIL released, until no other thread runs a call that started on the side
   being left (`Switch.holding_back`), at most `DRAIN_TIMEOUT_S`; then warn and go on.
3. Settle, in one native step: the target objects replace the gates and every other location of
   the transition (`install_many` for apply, `Journal.restore_all` for rollback). Nothing of the
   switch stays on the call path.

docs/reliability.md ("Threads") states the guarantee and its limits.
"""

from __future__ import annotations

import functools
import time
import types
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from .. import _core
from . import mechanisms

#: Longest wait for calls in flight on the side being left before switching anyway (seconds).
DRAIN_TIMEOUT_S = 2.0
_POLL_S = 50e-6
_FUNCTIONS = (types.FunctionType, _core.Dispatcher)
_ABSENT = object()


class Transaction(mechanisms.Transaction):
    """Records a group's writes; commit() makes them all at once, behind gates."""

    def __init__(self, journal: Any, group_id: str, report: Any):
        super().__init__(journal, group_id, report)
        self._writes: list[tuple[int, Any]] = []

    def set(self, entry: int, value: Any, label: str) -> None:
        if self._journal.peek(entry).get("current", _ABSENT) is value:
            # Already there (a registry filled by the plugin's own import): record it now, so
            # that a failure before commit() restores it; other threads see no change.
            self._journal.install(entry, value)
        else:
            self._writes.append((entry, value))
        self._report.targets.append(label)

    def commit(self) -> None:
        if not self._writes:
            return
        entries, values = zip(*self._writes, strict=True)
        pairs = [(self._journal.peek(e).get("original"), v) for e, v in self._writes]
        _through_gates(self._journal, {self._group: (entries, pairs)}, target_new=True)
        self._journal.install_many(entries, values)


def restore_all(journal: Any) -> dict[str, Any]:
    """journal.restore_all(), behind gates: every group disappears at once."""
    groups: dict[str, tuple[list[int], list[tuple[Any, Any]]]] = {}
    seen: set[tuple[int, str]] = set()
    infos = journal.entries()
    for entry in reversed(range(len(infos))):
        info = infos[entry]
        if not (info["open"] and info["installed"]):
            continue
        values = journal.peek(entry)
        location = (id(values["owner"]), info["name"])
        if location in seen:
            continue  # a location written twice: only its newest entry holds what is there
        seen.add(location)
        if values.get("current", _ABSENT) is not values["installed"]:
            continue  # drifted: a third party's object stays, restore_all reports it
        entries, pairs = groups.setdefault(info["group"], ([], []))
        entries.append(entry)
        pairs.append((values.get("original"), values["installed"]))
    _through_gates(journal, groups, target_new=False)
    return journal.restore_all()


def _through_gates(
    journal: Any,
    groups: dict[str, tuple[Sequence[int], Sequence[tuple[Any, Any]]]],
    target_new: bool,
) -> None:
    """Steps 1 and 2: install every group's gates in one native step, then drain."""
    entries: list[int] = []
    gates: list[Any] = []
    switches = []
    for group_id, (group_entries, pairs) in groups.items():
        switch = _core.Switch(
            [c for old, _ in pairs for c in _codes(old)],
            [c for _, new in pairs for c in _codes(new)],
            target_new,
            f"{group_id} ({'apply' if target_new else 'rollback'})",
        )
        for entry, (old, new) in zip(group_entries, pairs, strict=True):
            gate = _gate(old, new, switch)
            if gate is not None:
                entries.append(entry)
                gates.append(gate)
                switches.append(switch)
    if entries:
        journal.install_many(entries, gates)
        _drain(list({id(s): s for s in switches}.values()))


def _drain(switches: Iterable[Any]) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    waiting = list(switches)
    while waiting:
        waiting = [s for s in waiting if s.holding_back()]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            names = ", ".join(s.name for s in waiting)
            side = "new" if waiting[0].target_new else "old"  # one direction per transition
            warnings.warn(
                f"turbo_physai: after {DRAIN_TIMEOUT_S} s, threads are still inside calls that "
                f"started before the switch of {names}; switching anyway: for the rest of those "
                f"calls, the group's functions they look up are the {side} side's",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        time.sleep(_POLL_S)  # releases the GIL: the calls in flight can finish


def _gate(old: Any, new: Any, switch: Any) -> Any:
    """A Dispatcher between old and new with the same descriptor kind, or None where one would
    not behave like both (classes, properties, builtins, missing names: switched at settle)."""
    for kind in (staticmethod, classmethod):
        if isinstance(old, kind) and isinstance(new, kind):
            inner = _gate(old.__func__, new.__func__, switch)
            return None if inner is None else kind(inner)
    if isinstance(old, _FUNCTIONS) and isinstance(new, _FUNCTIONS):
        return _core.Dispatcher(old, new, switch, switch.name)
    return None


def _codes(obj: Any) -> list[types.CodeType]:
    """The code objects a call through ``obj`` starts in (no user code runs to find them)."""
    if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
        return _codes(obj.__func__)
    if isinstance(obj, property):
        return [c for f in (obj.fget, obj.fset, obj.fdel) for c in _codes(f)]
    if isinstance(obj, _core.Dispatcher):
        return _codes(obj.replacement)  # its original is the old side's
    if isinstance(obj, functools.partial):
        return _codes(obj.func)
    if isinstance(obj, types.FunctionType):
        inner = obj.__dict__.get("_turbo_physai_dispatcher")  # traced_dispatch.for_method's
        return _codes(inner) if inner is not None else [obj.__code__]
    return []
