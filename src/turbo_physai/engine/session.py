"""check, apply, rollback: plan the selected groups, prepare them, decide, install, report.

One code path serves both check and apply. check installs import-compatibility groups into a
scratch journal (later groups may need their placeholders to resolve) and restores the journal
before returning; apply keeps what it installed until rollback().
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _core
from ..config import GroupSelection, OptimizationConfig, load_config
from . import mechanisms, switching
from .catalog import planner_node, registry
from .context import CompatibilityContext, CompatibilityResult, TargetInfo
from .declarations import Group
from .paths import ResolutionError, lookup_raw, resolve_object
from .report import (
    APPLIED,
    APPLY,
    BLOCK,
    BLOCKED,
    CHECKED,
    FAIL,
    NOT_APPLICABLE,
    NOT_STARTED,
    PASS,
    ROLLED_BACK,
    SKIP,
    SKIPPED,
    Check,
    GroupReport,
    OptimizationReport,
)

ConfigLike = OptimizationConfig | str | os.PathLike[str] | None


class ApplyError(RuntimeError):
    """apply() could not proceed (already active) or, with strict=True, did not apply fully."""

    def __init__(self, message: str, report: OptimizationReport | None = None):
        super().__init__(message)
        self.report = report


@dataclass
class _Active:
    journal: Any
    report: OptimizationReport


_lock = threading.RLock()
_active: _Active | None = None


@dataclass
class _Selection:
    catalog: list[Group]
    requested: list[str]
    selections: dict[str, GroupSelection] = field(default_factory=dict)
    config: OptimizationConfig | None = None


def _select(config: ConfigLike, groups: Sequence[Group | str] | None, trust: bool) -> _Selection:
    from ..catalogs import discovery  # catalogs load lazily: never at `import turbo_physai`

    if config is None and groups is None:
        raise ValueError("nothing selected: pass a config or groups=[...]")
    if config is not None and not isinstance(config, OptimizationConfig):
        config = load_config(config)
    discovery.load(config.catalogs if config else (), trust=trust)
    known: dict[str, Group] = {g.id: g for g in registry.groups()}
    selections: dict[str, GroupSelection] = {}
    requested: list[str] = []
    for sel in config.groups if config else ():
        selections[sel.id] = sel
        requested.append(sel.id)
    for item in groups or ():
        if isinstance(item, Group):
            other = known.get(item.id)
            if other is not None and other != item:
                raise ValueError(
                    f"group {item.id!r} passed in groups= differs from the one declared by "
                    f"{other.source!r}"
                )
            known[item.id] = item
            requested.append(item.id)
        elif isinstance(item, str):
            requested.append(item)
        else:
            raise TypeError(f"groups= takes Group objects or group IDs, got {item!r}")
    return _Selection(list(known.values()), requested, selections, config)


def check(
    config: ConfigLike = None,
    *,
    groups: Sequence[Group | str] | None = None,
    force_groups: Iterable[str] = (),
    disable_groups: Iterable[str] = (),
    trust: bool = False,
    strict: bool = False,
) -> OptimizationReport:
    """Decide for every selected group whether it would apply; install nothing.
    ``trust=True`` lets the config import catalogs that are not installed. A group ID no
    catalog declares is reported blocked (``group.unknown``); ``strict=True`` raises instead."""
    with _lock:
        report, journal = _run("check", config, groups, force_groups, disable_groups, trust, strict)
        report.rollback = journal.restore_all()
        return report


def apply(
    config: ConfigLike = None,
    *,
    groups: Sequence[Group | str] | None = None,
    force_groups: Iterable[str] = (),
    disable_groups: Iterable[str] = (),
    strict: bool = False,
    trust: bool = False,
) -> OptimizationReport:
    """Apply the selected groups, each atomically. rollback() undoes everything.
    ``trust=True`` lets the config import catalogs that are not installed. ``strict=True``:
    an unknown group ID raises, and anything short of every group applied rolls back and
    raises ApplyError. Whatever escapes (a KeyboardInterrupt, say) leaves nothing installed."""
    global _active
    with _lock:
        if _active is not None:
            raise ApplyError("an apply() is already active; call turbo_physai.rollback() first")
        report, journal = _run("apply", config, groups, force_groups, disable_groups, trust, strict)
        if strict and not report.ok:
            report.rollback = journal.restore_all()
            bad = [
                f"{g.id} ({g.status}: {', '.join(g.reasons) or g.error})"
                for g in report.groups
                if g.status in (BLOCKED, ROLLED_BACK, NOT_STARTED)
            ]
            raise ApplyError(
                "strict apply failed, everything rolled back: " + "; ".join(bad), report
            )
        _active = _Active(journal, report)
        return report


@contextlib.contextmanager
def applied(config: ConfigLike = None, **kwargs: Any) -> Iterator[OptimizationReport]:
    """``with applied(cfg) as report:`` applies for the block and rolls back after it, also
    when the block raises (A/B comparisons, tests)."""
    report = apply(config, **kwargs)
    try:
        yield report
    finally:
        rollback()


def rollback() -> dict[str, Any]:
    """Restore every object apply() replaced, in reverse order. Returns what was restored,
    what a third party had patched on top of us (left in place), and what failed."""
    global _active
    with _lock:
        if _active is None:
            return {"restored": [], "drifted": [], "failed": []}
        outcome = switching.restore_all(_active.journal)
        _active.report.rollback = outcome
        _active = None
    if outcome["drifted"] or outcome["failed"]:
        warnings.warn(
            f"turbo_physai.rollback was not exact: {outcome}", RuntimeWarning, stacklevel=2
        )
    return outcome


def record_write(group_id: str, owner: Any, name: str, value: Any) -> bool:
    """Set ``owner.name = value`` on behalf of the applied group ``group_id``, in the journal of
    the active apply: rollback() restores the old value (or deletes the attribute if there was
    none) with the group's declared targets, and reports drift the same way.

    For replacements that must reach objects created after apply, such as flags of model
    instances (the timm catalog). The journal holds ``owner`` until rollback. Returns False and
    writes nothing when that group is not applied now (a wrapper called through a reference
    kept past rollback).

    Raises TypeError, writing nothing, when ``name`` is a data descriptor of ``owner``'s type
    (a property, a slot): its setter would change state the journal cannot see or restore.
    Write the state the setter would write instead.
    """
    descriptor = lookup_raw(type(owner), name)
    if hasattr(type(descriptor), "__set__") or hasattr(type(descriptor), "__delete__"):
        raise TypeError(
            f"record_write cannot write {type(owner).__qualname__}.{name}: it is a "
            f"{type(descriptor).__name__} of {type(owner).__qualname__}, and writing through it "
            "runs code whose effects rollback could not restore exactly"
        )
    with _lock:
        if _active is None:
            return False
        try:
            status = _active.report.group(group_id).status
        except KeyError:
            return False
        if status != APPLIED:
            return False
        label = f"<{type(owner).__qualname__} at {id(owner):#x}>.{name}"
        entry = _active.journal.snapshot(owner, name, label, group_id)
        _active.journal.install(entry, value)
        return True


def active_report() -> OptimizationReport | None:
    """The report of the apply() in force, if any."""
    return _active.report if _active else None


def _run(mode, config, groups, force_groups, disable_groups, trust, strict):
    selection = _select(config, groups, trust)
    by_id = {g.id: g for g in selection.catalog}
    force, disable = set(force_groups), set(disable_groups)
    config_disabled = {s.id for s in selection.selections.values() if not s.enabled}
    # An ID no catalog declares is reported blocked and the others go on (TurboPhysAI's rule);
    # strict keeps the planner's error for those not disabled.
    unknown = [g for g in dict.fromkeys(selection.requested) if g not in by_id]
    if strict:
        unknown = [g for g in unknown if g in disable | config_disabled]
    requested = [g for g in selection.requested if g not in unknown]
    plan = _core.plan_groups([planner_node(g) for g in selection.catalog], requested)
    for name, ids in (("force_groups", force), ("disable_groups", disable)):
        not_selected = sorted(ids - set(plan.order) - set(unknown))
        if not_selected:
            raise ValueError(f"{name} names groups that are not selected: {not_selected}")
    disable |= config_disabled
    both = sorted(force & disable)
    if both:
        raise ValueError(f"groups both forced and disabled: {both}")

    conflicts: dict[str, list[Check]] = {}
    for c in plan.conflicts:
        for me, other in ((c.first, c.second), (c.second, c.first)):
            conflicts.setdefault(me, []).append(
                Check(
                    "conflict.target",
                    FAIL,
                    f"{c.path!r} is also written by group {other!r}",
                    actual=other,
                    reason="conflict.target",
                )
            )

    from ..config.checks import gate  # the YAML schema: imported on use, not with the package

    config_checks = gate(selection.config)
    report = OptimizationReport(mode)
    journal = _core.Journal()
    for gid in unknown:
        report.groups.append(_unknown(gid, skipped=gid in disable))
    done: dict[str, GroupReport] = {}
    unapplied: dict[str, bool] = {}  # import-compat group that did not apply -> stops the plan
    try:
        for gid in plan.order:
            group = by_id[gid]
            gr = GroupReport(gid, added_by_dependency=gid in plan.added)
            report.groups.append(gr)
            done[gid] = gr
            if gid in disable:
                gr.decision, gr.status = SKIP, SKIPPED
                continue
            sel = selection.selections.get(gid) or GroupSelection(gid)
            checks = config_checks(group) + conflicts.get(gid, [])
            stoppers = [] if group.import_compat else [g for g, s in unapplied.items() if s]
            if stoppers:
                checks.append(_stopped_by(stoppers))
            held = bool(stoppers) or any(d in unapplied for d in group.depends_on)
            _run_group(mode, group, sel, gr, done, checks, gid in force, journal, held)
            if group.import_compat and (
                gr.decision == BLOCK or gr.status in (ROLLED_BACK, NOT_STARTED)
            ):
                unapplied[gid] = _stops_plan(gr)
    except BaseException as err:
        # Exceptions of user code are blocks or rollbacks of one group (_run_group); what
        # gets here (KeyboardInterrupt, SystemExit...) ends the whole call: nothing stays.
        _abandon(mode, report, journal, err)
        raise
    return report, journal


def _unknown(gid: str, skipped: bool) -> GroupReport:
    gr = GroupReport(gid)
    if skipped:
        gr.decision, gr.status = SKIP, SKIPPED
        return gr
    message = f"no installed or named catalog declares group {gid!r}"
    gr.checks.append(Check("group.unknown", FAIL, message, reason="group.unknown"))
    gr.decision, gr.status = BLOCK, BLOCKED
    return gr


def _stops_plan(gr: GroupReport) -> bool:
    """Whether an import-compatibility group that did not apply stops the groups after it.
    It does unless its own compatibility_check declined it (the catalog says the model runs
    here without it) or only its dependencies blocked it (they answer for themselves)."""
    if gr.status in (ROLLED_BACK, NOT_STARTED):
        return True
    return any(
        c.blocks
        and c.code != "dependency"
        and not (c.code == "compatibility_check" and c.reason != "compatibility.error")
        for c in gr.checks
    )


def _stopped_by(stoppers: list[str]) -> Check:
    return Check(
        "import_compat",
        FAIL,
        f"import-compatibility group(s) {', '.join(map(repr, stoppers))} did not apply: "
        "preparing this group would import the model's modules without them",
        actual=stoppers,
        reason="import_compat.blocked",
    )


def _abandon(mode: str, report: OptimizationReport, journal: Any, err: BaseException) -> None:
    """Restore everything this call installed and say in the exception where it stopped."""
    report.rollback = journal.restore_all()
    where = "before any group"
    if report.groups:
        gr = report.groups[-1]
        stage = "installing" if "prepare" in gr.timings_ms else "preparing"
        gr.error = f"{type(err).__name__}: {err}"
        where = f"while {stage} group {gr.id!r}"
    note = (
        f"turbo_physai.{mode}() was interrupted {where}; everything it had installed was "
        f"restored: {report.rollback}"
    )
    if hasattr(err, "add_note"):  # Python >= 3.11
        err.add_note(note)


def _run_group(mode, group, sel, gr, done, extra_checks, forced, journal, held=False) -> None:
    t0 = time.perf_counter()
    gr.checks.extend(extra_checks)
    failed_dep = False
    for dep in group.depends_on:
        d = done[dep]
        if d.decision == APPLY and d.status in (ROLLED_BACK, NOT_STARTED):
            failed_dep = True
            gr.checks.append(
                Check(
                    "dependency",
                    FAIL,
                    f"dependency {dep!r} is {d.status}",
                    actual=d.status,
                    reason="dependency.failed",
                )
            )
        elif d.decision != APPLY:
            gr.checks.append(
                Check(
                    "dependency",
                    FAIL,
                    f"dependency {dep!r}: {d.decision}",
                    actual=d.decision,
                    reason="dependency.blocked",
                )
            )
        else:
            gr.checks.append(Check("dependency", PASS, dep))
    if failed_dep and mode == "apply":
        gr.status = NOT_STARTED
        return
    prepared = []
    # A blocked dependency does not stop preparation: the report then also shows whether this
    # group could apply on its own. A failing compatibility_check does stop it, and so does
    # ``held``: an import-compatibility group it needs did not apply, and resolving the
    # targets would import the model without it.
    where = f"compatibility_check {group.compatibility_check}"
    try:
        if not held and not any(c.blocks and c.code != "dependency" for c in gr.checks):
            gr.checks.append(_compatibility(group, sel))
        if not held and not any(c.blocks and c.code != "dependency" for c in gr.checks):
            ctx = mechanisms.PrepareContext(group.id, sel.options, sel.trust, gr)
            for decl in group.declarations:
                where = decl.describe()
                p = mechanisms.prepare(decl, ctx)
                prepared.append(p)
                gr.checks.extend(p.checks)
    except Exception as err:  # user code the mechanisms do not expect to fail (a __signature__)
        message = f"{where} raised {type(err).__name__}: {err}"
        gr.checks.append(Check("prepare", FAIL, message, reason="prepare.error"))
    for c in gr.checks:
        if c.status == FAIL and c.overrideable and forced:
            c.forced = True
    gr.timings_ms["prepare"] = (time.perf_counter() - t0) * 1e3
    if any(c.blocks for c in gr.checks):
        gr.decision, gr.status = BLOCK, BLOCKED
        gr.dispatchers.clear()
        return
    if mode == "check" and not group.import_compat:
        gr.status = CHECKED
        gr.dispatchers.clear()  # built for checking, never installed: no counts to report
        gr.targets = [path for p in prepared for path in _would_write(p)]
        return
    _install(mode, group, prepared, gr, journal)


def _would_write(p) -> list[str]:
    return list(p.declaration.writes) if p.ok else []


def _install(mode, group, prepared, gr, journal) -> None:
    t0 = time.perf_counter()
    tx = switching.Transaction(journal, group.id, gr)
    try:
        for p in prepared:
            p.snapshot(tx)
        for p in prepared:
            p.install(tx)
        tx.commit()  # other threads see the whole group at once
    except Exception as err:
        gr.restore = journal.restore_group(group.id)
        gr.error = f"{type(err).__name__}: {err}"
        gr.targets.clear()
        gr.dispatchers.clear()
        if mode == "check":
            gr.checks.append(Check("install", FAIL, gr.error, reason="install.error"))
            gr.decision, gr.status = BLOCK, BLOCKED
        else:
            gr.status = ROLLED_BACK
    else:
        gr.status = APPLIED if mode == "apply" else CHECKED
    gr.timings_ms["install"] = (time.perf_counter() - t0) * 1e3


def _compatibility(group: Group, sel: GroupSelection) -> Check:
    if group.compatibility_check is None:
        return Check("compatibility_check", NOT_APPLICABLE)
    code = "compatibility_check"
    try:
        fn = resolve_object(group.compatibility_check)
    except ResolutionError as err:
        return Check(code, FAIL, str(err), reason="compatibility.error")
    targets = tuple(
        TargetInfo(path, d.kind)
        for d in group.declarations
        for path in (*d.writes, *getattr(d, "replaces", ()))
    )
    reads = tuple(path for d in group.declarations for path in getattr(d, "reads", ()))
    try:
        result = fn(CompatibilityContext(group.id, sel.options, targets, reads))
    except Exception as err:
        return Check(
            code,
            FAIL,
            f"{group.compatibility_check} raised {type(err).__name__}: {err}",
            reason="compatibility.error",
        )
    if not isinstance(result, CompatibilityResult):
        return Check(
            code,
            FAIL,
            f"{group.compatibility_check} returned "
            f"{type(result).__name__}, expected CompatibilityResult",
            reason="compatibility.error",
        )
    if not result.compatible:
        return Check(
            code,
            FAIL,
            result.reason,
            result.expected,
            result.actual,
            reason=result.code,
        )
    return Check(code, PASS, result.reason, result.expected, result.actual)
