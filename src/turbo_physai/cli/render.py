"""Human output: rich tables for reports, configs and group lists; JSON for ``--json``."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..engine.report import headline

console = Console(highlight=False, soft_wrap=True)
#: Words up to this long are never folded inside a table cell.
LONGEST_WORD = 40

_STYLE = {
    "applied": "green",
    "checked": "green",
    "skipped": "yellow",
    "blocked": "red",
    "rolled_back": "red",
    "not_started": "red",
}


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def table(
    title: str, columns: list[str], rows: list[list[str]], whole: tuple[int, ...] = (0,)
) -> None:
    """Columns ``whole`` (IDs, by default the first) are never broken, not even on a narrow
    terminal or in an 80-column log; the others wrap at spaces, as wide as their longest word
    (reason codes, target paths) up to :data:`LONGEST_WORD`, and fold only longer ones."""
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        plain = [Text.from_markup(r[i]).plain for r in rows]
        if i in whole:
            longest = max((len(line) for cell in plain for line in cell.splitlines()), default=0)
            t.add_column(c, no_wrap=True, min_width=max(longest, len(c)))
        else:
            longest = max((len(word) for cell in plain for word in cell.split()), default=0)
            t.add_column(c, overflow="fold", min_width=min(longest, LONGEST_WORD))
    for r in rows:
        t.add_row(*r)
    console.print(t)


def report(data: dict[str, Any], title: str | None = None) -> None:
    """An OptimizationReport as saved by ``to_json``."""
    rows = []
    for g in data["groups"]:
        style = _STYLE.get(g["status"], "")
        detail = ", ".join(g["reasons"]) or "\n".join(g["targets"]) or "-"
        if g.get("error"):
            detail += f" ({g['error']})"
        forced = [c["code"] for c in g["checks"] if c.get("forced")]
        if forced:
            detail += f" [forced: {', '.join(forced)}]"
        counts = "; ".join(
            f"{label}: {c['replacement']}/{c['original']}" for label, c in g["dispatchers"].items()
        )
        rows.append(
            [
                g["id"],
                g["decision"],
                f"[{style}]{g['status']}[/]" if style else g["status"],
                detail + (f"\ndispatch (replacement/original): {counts}" if counts else ""),
            ]
        )
    table(
        title or f"turbo_physai {headline(data)}",
        ["group", "decision", "status", "reasons / targets"],
        rows,
    )
    for g in data["groups"]:
        failed = [c for c in g["checks"] if c["status"] == "fail"]
        for c in failed:
            console.print(
                f"  [red]{g['id']}[/]: {c['code']}: {c['message']}"
                + (
                    f" (expected {c['expected']}, actual {c['actual']})"
                    if c["expected"] is not None
                    else ""
                ),
                markup=True,
            )


def run_report(data: dict[str, Any]) -> None:
    """The merged report of ``turbo-physai run``: one row per process, then each report."""
    rows = []
    for p in data["processes"]:
        proc, act = p["process"], p["activation"]
        groups = [
            g["id"] for g in (p["report"] or {}).get("groups", []) if g["status"] == "applied"
        ]
        rows.append(
            [
                str(proc["rank"]) if proc["rank"] is not None else "-",
                str(proc["pid"]),
                "ok" if act["ok"] else f"[red]failed[/]: {act['error']}",
                (p["digest"] or "-")[:19],
                ", ".join(groups) or "-",
            ]
        )
    table(
        f"turbo-physai run {data['run']}: exit {data['exit_code']}",
        ["rank", "pid", "activation", "digest", "applied groups"],
        rows,
    )
    if data["summary"]["mismatch"]:
        console.print("[red]ranks applied different optimizations[/]")
