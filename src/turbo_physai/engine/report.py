"""What check/apply decided and did: per-group checks, decisions, installed targets, timings."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Check statuses.
PASS, WARNING, FAIL, UNKNOWN, NOT_APPLICABLE = (
    "pass",
    "warning",
    "fail",
    "unknown",
    "not_applicable",
)
# Decisions.
APPLY, SKIP, BLOCK = "apply", "skip", "block"
# Group states after check/apply.
CHECKED, APPLIED, SKIPPED, BLOCKED = "checked", "applied", "skipped", "blocked"
ROLLED_BACK, NOT_STARTED = "rolled_back", "not_started"


@dataclass
class Check:
    """One check of a group: ``code`` names it, ``reason`` is the block reason code on failure."""

    code: str
    status: str
    message: str = ""
    expected: Any = None
    actual: Any = None
    overrideable: bool = False
    forced: bool = False
    reason: str | None = None

    @property
    def blocks(self) -> bool:
        return self.status == FAIL and not self.forced

    def to_dict(self) -> dict[str, Any]:
        out = {
            "code": self.code,
            "status": self.status,
            "message": self.message,
            "expected": _jsonable(self.expected),
            "actual": _jsonable(self.actual),
            "overrideable": self.overrideable,
        }
        if self.forced:
            out["forced"] = True
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass
class GroupReport:
    id: str
    decision: str = APPLY
    status: str = CHECKED
    checks: list[Check] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    dispatchers: dict[str, Any] = field(default_factory=dict)  # label -> live Dispatcher
    timings_ms: dict[str, float] = field(default_factory=dict)
    added_by_dependency: bool = False
    error: str | None = None
    restore: dict[str, Any] | None = None

    @property
    def reasons(self) -> list[str]:
        codes = [c.reason or c.code for c in self.checks if c.blocks]
        return list(dict.fromkeys(codes))  # one entry per code, first-seen order

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "decision": self.decision,
            "status": self.status,
            "reasons": self.reasons,
            "checks": [c.to_dict() for c in self.checks],
            "targets": list(self.targets),
            "dispatchers": {label: dict(d.counts) for label, d in self.dispatchers.items()},
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
            "added_by_dependency": self.added_by_dependency,
        }
        if self.error:
            out["error"] = self.error
        if self.restore:
            out["restore"] = self.restore
        return out


def environment() -> dict[str, Any]:
    """Facts about this process; never imports anything (torch is reported only if loaded)."""
    from turbo_physai import __version__

    env: dict[str, Any] = {
        "turbo_physai": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pid": os.getpid(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = getattr(torch, "__version__", "unknown")
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        if var in os.environ:
            env[var.lower()] = os.environ[var]
    return env


@dataclass
class OptimizationReport:
    """Result of check() or apply(). ``str()`` is a readable table; JSON and Markdown for files."""

    mode: str
    groups: list[GroupReport] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=environment)
    rollback: dict[str, Any] | None = None

    def group(self, group_id: str) -> GroupReport:
        for g in self.groups:
            if g.id == group_id:
                return g
        raise KeyError(f"no group {group_id!r} in this report")

    @property
    def summary(self) -> dict[str, Any]:
        decisions = {d: 0 for d in (APPLY, SKIP, BLOCK)}
        statuses: dict[str, int] = {}
        for g in self.groups:
            decisions[g.decision] += 1
            statuses[g.status] = statuses.get(g.status, 0) + 1
        return {"groups": len(self.groups), "decisions": decisions, "statuses": statuses}

    @property
    def ok(self) -> bool:
        """True when no group was blocked, rolled back or left unstarted."""
        bad = {BLOCKED, ROLLED_BACK, NOT_STARTED}
        return not any(g.status in bad or g.decision == BLOCK for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "mode": self.mode,
            "summary": self.summary,
            "environment": self.environment,
            "groups": [g.to_dict() for g in self.groups],
        }
        if self.rollback is not None:
            out["rollback"] = self.rollback
        return out

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False)
        if path is not None:
            write_atomic(path, text + "\n")
        return text

    def to_markdown(self, path: str | os.PathLike[str] | None = None) -> str:
        lines = [f"# turbo_physai {self.mode} report", "", headline(self.to_dict())]
        lines += ["", "| group | decision | status | reasons | targets |", "|---|---|---|---|---|"]
        for g in self.groups:
            lines.append(
                f"| `{g.id}` | {g.decision} | {g.status} | {', '.join(g.reasons) or '-'} "
                f"| {'<br>'.join(g.targets) or '-'} |"
            )
        for g in self.groups:
            lines += ["", f"## `{g.id}`", "", "| check | status | expected | actual | message |"]
            lines.append("|---|---|---|---|---|")
            for c in g.checks:
                lines.append(
                    f"| {c.code} | {c.status}{' (forced)' if c.forced else ''} "
                    f"| {_cell(c.expected)} | {_cell(c.actual)} | {_cell(c.message)} |"
                )
            for label, d in g.dispatchers.items():
                counts = d.counts
                lines.append(
                    f"\nDispatcher `{label}`: replacement {counts['replacement']}, "
                    f"original {counts['original']} calls"
                )
        text = "\n".join(lines) + "\n"
        if path is not None:
            write_atomic(path, text)
        return text

    def __str__(self) -> str:
        rows = [("group", "decision", "status", "reasons / targets")]
        for g in self.groups:
            detail = ", ".join(g.reasons) if g.reasons else ", ".join(g.targets)
            if g.error:
                detail = f"{detail} ({g.error})" if detail else g.error
            rows.append((g.id, g.decision, g.status, detail or "-"))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"turbo_physai {headline(self.to_dict())}"]
        for r in rows:
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
        for g in self.groups:
            for c in g.checks:
                if c.blocks:
                    lines.append(f"  {g.id}: {c.reason or c.code}: {c.message}")
            for label, d in g.dispatchers.items():
                c = d.counts
                lines.append(
                    f"  dispatcher {label}: replacement={c['replacement']} original={c['original']}"
                )
        return "\n".join(lines)


def headline(report: dict[str, Any]) -> str:
    """``check: 3 groups: 2 apply, 0 skip, 1 block (not ok)`` of a report's ``to_dict()``."""
    s = report["summary"]
    counts = ", ".join(f"{n} {decision}" for decision, n in s["decisions"].items())
    ok = not s["decisions"][BLOCK] and not any(
        s["statuses"].get(status) for status in (BLOCKED, ROLLED_BACK, NOT_STARTED)
    )
    noun = "group" if s["groups"] == 1 else "groups"
    return f"{report['mode']}: {s['groups']} {noun}: {counts}" + ("" if ok else " (not ok)")


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write through a temporary file in the same directory and rename, so readers never see
    a half-written report."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return str(value).replace("|", "\\|").replace("\n", " ")
