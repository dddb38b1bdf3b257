"""``turbo-physai run``: start a command so that every Python process in it activates.

The command gets ``launch/site`` first on PYTHONPATH (its sitecustomize does the work in each
process, see :mod:`turbo_physai.launch.process`), the run settings in ``TURBO_PHYSAI_RUN`` and
the RuntimeConfig's environment, then ``--set`` on top. When it ends, the per-process reports
of this run are merged into ``<report-dir>/report.json`` and ``report.md``: one report listing
every process/rank. :func:`check_runtime` is ``turbo-physai check`` of a RuntimeConfig.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import turbo_physai

from ..config import ConfigError, load_config
from ..config.runtime import RuntimeConfig, load_runtime_config, loads_code, overrides
from ..engine.report import write_atomic
from ..launch import ENV_HOME, ENV_SETTINGS, EXIT_ACTIVATION, SITE_DIR
from . import render


def run(args: argparse.Namespace) -> int:
    from ..catalogs import discovery

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise ConfigError("run needs a command after --")
    config = None
    if args.config:
        # Fail here, with status 2, for what every process would fail on anyway.
        parsed = load_config(args.config)
        discovery.load(parsed.catalogs, trust=args.trust_config)
        from ..engine.catalog import registry

        unknown = [g.id for g in parsed.groups
                   if g.enabled and g.id not in registry and g.id not in args.disable_group]
        if unknown:  # activation is strict: every process would refuse them
            raise ConfigError(
                f"{args.config}: no installed catalog declares {', '.join(map(repr, unknown))}; "
                "run applies strictly: --disable-group them or install their catalog"
            )
        config = str(Path(parsed.path or args.config).resolve())  # a config ID: its file
    runtime = _runtime(args)
    report_dir = Path(args.report_dir).resolve()
    run_id = uuid.uuid4().hex[:12]
    settings = {
        "config": config,
        "force": args.force_group,
        "disable": args.disable_group,
        "trust": args.trust_config,
        "report_dir": str(report_dir),
        "run_id": run_id,
        "placement": runtime.placement(numa=False if args.disable_numa else None)
        if runtime
        else None,
    }
    env = (runtime or RuntimeConfig()).environ(os.environ, overrides(args.set))
    env[ENV_SETTINGS] = json.dumps(settings)
    env[ENV_HOME] = str(Path(turbo_physai.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE_DIR), env.get("PYTHONPATH")]))
    try:
        status = subprocess.call(command, env=env)
    except OSError as err:
        print(f"turbo-physai run: cannot start {command[0]!r}: {err}", file=sys.stderr)
        return 127
    if status < 0:  # killed by a signal: report it the way a shell does
        status = 128 - status
    merged = merge(report_dir, run_id, command, status)
    failed = merged["summary"]["activation_failed"]
    print(
        f"turbo-physai run: {len(merged['processes'])} process report(s) in "
        f"{report_dir / 'report.json'}",
        file=sys.stderr,
    )
    if failed:
        print(
            f"turbo-physai run: activation failed in {len(failed)} process(es): "
            + "; ".join(failed),
            file=sys.stderr,
        )
        return EXIT_ACTIVATION
    return status


def _runtime(args: argparse.Namespace) -> RuntimeConfig | None:
    """The RuntimeConfig, refused when it sets a code-loading variable without trust."""
    if not args.runtime_config:
        return None
    runtime = load_runtime_config(args.runtime_config)
    untrusted = runtime.untrusted()
    if untrusted and not args.trust_config:
        raise ConfigError(
            f"{untrusted[0]}: setting it makes processes load code from where its value points; "
            "a config is data: pass --trust-config to let this RuntimeConfig set "
            + ", ".join(u.rsplit(": ", 1)[1] for u in untrusted)
        )
    return runtime


def check_runtime(args: argparse.Namespace) -> int:
    """``turbo-physai check RUNTIME.yaml``: what the file would do here. Exit 1 when ``run``
    would refuse it (code-loading variables without --trust-config) or a rank could not be
    placed as it asks on this machine."""
    from ..launch.placement import nodes

    runtime = load_runtime_config(args.config)
    here = nodes()
    rows, findings = [], []
    for name, value in runtime.set.items():
        note = ""
        if loads_code(name):
            note = "loads code" if args.trust_config else "loads code: needs --trust-config"
            if not args.trust_config:
                findings.append(f"{name}: loads code; run needs --trust-config")
        rows.append(["set", name, value, note])
    rows += [["unset", name, "", ""] for name in runtime.unset]
    for rank, node in sorted(runtime.rank_numa.items()):
        note = "cpus + memory" if node in here else f"node {node} does not exist here"
        if node not in here and runtime.numa:
            findings.append(f"rank_numa.{rank}: {note}")
        rows.append(["rank_numa", str(rank), str(node), note])
    for rank, cpus in sorted(runtime.rank_affinity.items()):
        bad = sorted(set(cpus) - os.sched_getaffinity(0))
        if bad:
            findings.append(f"rank_affinity.{rank}: CPUs {bad} not usable here")
        rows.append(["rank_affinity", str(rank), ",".join(map(str, cpus)), ""])
    auto = "each rank to its GPU's node" if len(here) > 1 else "nothing (one NUMA node here)"
    rows.append(["numa", "", str(runtime.numa).lower(), f"binds {auto}" if runtime.numa else ""])
    if args.json:
        render.emit_json({"kind": "RuntimeConfig", "numa_nodes": sorted(here),
                          "rows": rows, "findings": findings})
    else:
        render.table(f"RuntimeConfig {args.config}: {len(findings)} finding(s)",
                     ["what", "name", "value", "note"], rows)
        for finding in findings:
            render.console.print(f"  [red]{finding}[/]")
    return 1 if findings else 0


def merge(report_dir: Path, run_id: str, command: list[str], status: int) -> dict[str, Any]:
    processes = []
    for path in sorted(report_dir.glob(f"process-{run_id}-*.json")):
        processes.append(json.loads(path.read_text(encoding="utf-8")))
    processes.sort(
        key=lambda p: (p["process"]["rank"] is None, p["process"]["rank"] or 0, p["process"]["pid"])
    )
    ranks = [p for p in processes if p["process"]["rank"] is not None]
    digests: dict[str, list[int]] = {}
    for p in ranks:
        digests.setdefault(p["digest"] or "none", []).append(p["process"]["rank"])
    merged = {
        "run": run_id,
        "command": command,
        "exit_code": status,
        "summary": {
            "processes": len(processes),
            "ranks": sorted({p["process"]["rank"] for p in ranks}),
            "activation_failed": [
                f"{_who(p)}: {p['activation']['error']}"
                for p in processes
                if not p["activation"]["ok"]
            ],
            "digests": digests,
            "mismatch": len(digests) > 1,
        },
        "processes": processes,
    }
    write_atomic(report_dir / "report.json", json.dumps(merged, indent=2) + "\n")
    write_atomic(report_dir / "report.md", _markdown(merged))
    return merged


def _who(p: dict[str, Any]) -> str:
    rank = p["process"]["rank"]
    return f"rank {rank}" if rank is not None else f"pid {p['process']['pid']}"


def _markdown(merged: dict[str, Any]) -> str:
    lines = [
        f"# turbo-physai run {merged['run']}",
        "",
        f"Command: `{' '.join(merged['command'])}`, exit status {merged['exit_code']}",
        "",
        "| rank | pid | activation | digest | applied groups |",
        "|---|---|---|---|---|",
    ]
    for p in merged["processes"]:
        proc, act = p["process"], p["activation"]
        applied = [
            g["id"] for g in (p["report"] or {}).get("groups", []) if g["status"] == "applied"
        ]
        lines.append(
            f"| {proc['rank'] if proc['rank'] is not None else '-'} | {proc['pid']} "
            f"| {'ok' if act['ok'] else 'failed: ' + str(act['error'])} "
            f"| `{p['digest']}` | {', '.join(applied) or '-'} |"
        )
    if merged["summary"]["mismatch"]:
        lines += ["", "**Ranks applied different optimizations.**"]
    return "\n".join(lines) + "\n"
