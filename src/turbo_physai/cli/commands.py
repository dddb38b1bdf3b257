"""The commands of ``turbo-physai`` other than ``run``. Each returns its exit status."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import yaml
from rich.text import Text

from ..config import ConfigError, OptimizationConfig, load_config
from . import render
from .needs import need

OK, FINDINGS = 0, 1
#: Built-in catalogs' module prefix, left out of the group table (the catalog table names it).
BUILTIN_PREFIX = "turbo_physai.catalogs."
#: Catalogs at least this large get a progress bar while generate hashes targets.
LARGE_CATALOG = 20


def list_groups(args: argparse.Namespace) -> int:
    if args.configs:
        return _list_configs(args)
    from ..catalogs import discovery
    from ..engine.catalog import registry
    from ..engine.session import check

    discovery.load()
    hosts = {s.module: _host_packages(s.module) for s in discovery.installed()}
    rows = []
    for g in registry.groups():
        # Checking imports the host libraries; their own deprecation notices at import time
        # (rfdetr's torch.jit.script under torch 2.14) say nothing about the groups listed.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            verdict = check(groups=[g.id]).group(g.id)  # alone, with its dependencies
        rows.append(
            {
                "id": g.id,
                "catalog": g.source,
                "host_packages": hosts.get(g.source),
                "import_compat": g.import_compat,
                "depends_on": list(g.depends_on),
                "would_apply": verdict.decision == "apply",
                "reasons": verdict.reasons,
            }
        )
    if args.json:
        render.emit_json(rows)
        return OK
    catalogs = {r["catalog"]: [x for x in rows if x["catalog"] == r["catalog"]] for r in rows}
    render.table(
        f"{len(catalogs)} catalogs installed",
        ["catalog", "host library here", "groups that apply here"],
        [
            [name, _host_cell(hosts.get(name)), f"{sum(r['would_apply'] for r in of)} of {len(of)}"]
            for name, of in catalogs.items()
        ],
    )
    missing = list(
        dict.fromkeys(n for h in hosts.values() if h for n, release in h.items() if release is None)
    )
    if missing:
        render.console.print(
            f"not installed here: {', '.join(missing)}; install a host library with pip "
            "install NAME (docs/catalogs/ say which releases each catalog is validated on)",
            markup=False,
        )
    render.table(
        f"{len(rows)} groups in the installed catalogs",
        ["group", "catalog", "depends on", "applies here"],
        [
            [
                r["id"],
                r["catalog"].removeprefix(BUILTIN_PREFIX),
                ", ".join(r["depends_on"]) or "-",
                "yes" if r["would_apply"] else _not_applying(r),
            ]
            for r in rows
        ],
    )
    return OK


def _host_packages(catalog: str) -> dict[str, str | None] | None:
    """The release of each distribution the catalog patches (``HOST_PACKAGES``), None where it
    is not installed; None when the catalog does not declare them."""
    names = getattr(sys.modules.get(catalog), "HOST_PACKAGES", None)
    if names is None:
        return None
    releases: dict[str, str | None] = {}
    for name in names:
        try:
            releases[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            releases[name] = None
    return releases


def _host_cell(releases: dict[str, str | None] | None) -> str:
    if releases is None:
        return "- (the catalog declares no HOST_PACKAGES)"
    if not releases:
        return "- (a source tree, no distribution)"
    return "\n".join(f"{name} {release or 'not installed'}" for name, release in releases.items())


def _not_applying(row: dict[str, Any]) -> str:
    text = f"no: {', '.join(row['reasons'])}"
    hosts = row["host_packages"]
    if hosts and not any(hosts.values()):
        text += " (host library not installed)"
    return text


def _list_configs(args: argparse.Namespace) -> int:
    from ..config.loader import SHIPPED_DIR, config_ids

    rows = []
    for config_id, file in config_ids().items():
        row: dict[str, Any] = {"id": config_id, "file": str(file)}
        row["shipped"] = file.parent == SHIPPED_DIR
        try:
            config = load_config(file)
        except ConfigError as err:
            row.update(description=f"error: {err}", groups=[])
        else:
            row["description"] = str(config.metadata.get("description", ""))
            row["groups"] = [g.id for g in config.groups if g.enabled]
        rows.append(row)
    if args.json:
        render.emit_json(rows)
        return OK
    render.table(
        "config IDs: name one wherever a config file goes (check, show, diff, run --config, "
        "turbo_physai.apply); `turbo-physai show ID` prints one",
        ["config ID", "description"],
        [
            [
                r["id"],
                f"{r['description']} ({len(r['groups'])} groups"
                + ("" if r["shipped"] else f"; {r['file']}") + ")",
            ]
            for r in rows
        ],
    )
    return OK


def generate(args: argparse.Namespace) -> int:
    from ..config.generator import generate as make
    from ..config.generator import write

    recipe = load_config(args.recipe) if args.recipe else None
    ids = [g.id for g in recipe.groups if g.enabled] if recipe else []
    ids += [i for i in args.groups if i not in ids]
    if not ids:
        raise ConfigError("nothing to generate: name group IDs or a --recipe")
    meta = dict(recipe.metadata) if recipe else {}
    meta["id"] = args.id or meta.get("id") or Path(args.output).stem
    meta["version"] = args.version or meta.get("version") or "0.1.0"
    options = {g.id: g.options for g in recipe.groups} if recipe else {}
    with _Progress(enabled=not args.json) as progress:
        config = make(
            ids,
            metadata=meta,
            options=options,
            base=recipe,
            trust=args.trust_config,
            progress=progress,
        )
    if args.model:
        config = OptimizationConfig(
            config.groups,
            config.metadata,
            {"name": args.model},
            config.compatibility,
            catalogs=config.catalogs,
        )
    write(
        config,
        args.output,
        force=args.force,
        header="generated by turbo-physai generate; regenerate instead of editing trust",
    )
    added = [g.id for g in config.groups if g.id not in ids]
    if args.json:
        render.emit_json(
            {
                "written": args.output,
                "groups": [g.id for g in config.groups],
                "added_by_dependency": added,
            }
        )
    else:
        render.console.print(
            f"wrote {args.output}: {len(config.groups)} groups"
            + (f" ({', '.join(added)} added as dependencies)" if added else "")
        )
    return OK


class _Progress:
    """A rich progress bar, shown only for large catalogs on a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and render.console.is_terminal
        self.bar: Any = None

    def __enter__(self) -> _Progress:
        return self

    def __call__(self, done: int, total: int, group_id: str) -> None:
        if not self.enabled or total < LARGE_CATALOG:
            return
        if self.bar is None:
            from rich.progress import Progress

            self.bar = Progress(console=render.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("hashing targets", total=total)
        self.bar.update(self.task, completed=done + 1, description=group_id)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def check(args: argparse.Namespace) -> int:
    from ..config.runtime import is_runtime_config
    from ..engine.session import check as run_check

    if is_runtime_config(args.config):
        from .run import check_runtime

        return check_runtime(args)
    report = run_check(
        args.config,
        force_groups=args.force_group,
        disable_groups=args.disable_group,
        trust=args.trust_config,
    )
    if args.report:
        report.to_json(args.report)
    if args.json:
        render.emit_json(report.to_dict())
    else:
        render.report(report.to_dict())
    return OK if report.ok else FINDINGS


def show(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    data = config.to_dict()
    if args.json:
        render.emit_json({**data, "sources": list(config.sources)})
        return OK
    if len(config.sources) > 1:
        render.console.print("# merged from: " + " <- ".join(config.sources))
    render.console.print(yaml.safe_dump(data, sort_keys=False, width=100), end="", markup=False)
    return OK


def diff(args: argparse.Namespace) -> int:
    old, new = load_config(args.old).to_dict(), load_config(args.new).to_dict()
    changes = _diff(old, new)
    if args.json:
        render.emit_json([{**c, "path": ".".join(c["path"])} for c in changes])
        return FINDINGS if changes else OK
    if not changes:
        render.console.print("no differences")
        return OK
    lines = [
        line
        for c in changes
        for line in (
            _leaves("+", c["path"], c["new"]) if "old" not in c
            else _leaves("-", c["path"], c["old"]) if "new" not in c
            else [("~", _key_path(c["path"]), f"{_value(c['old'])} -> {_value(c['new'])}")]
        )
    ]
    render.console.print(f"{args.old} -> {args.new}: {len(lines)} changed keys", markup=False)
    for sign, where, value in lines:
        style = {"+": "green", "-": "red", "~": "yellow"}[sign]
        render.console.print(Text.assemble((sign, style), f" {where}: {value}"))
    return FINDINGS


def _diff(old: Any, new: Any, path: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Changed leaves; groups are compared by ID (order changes are reported once). A key
    present on one side only is one change carrying its whole value."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in dict.fromkeys([*old, *new]):
            where = (*path, str(key))
            if key not in new:
                out.append({"path": where, "old": old[key]})
            elif key not in old:
                out.append({"path": where, "new": new[key]})
            else:
                out += _diff(old[key], new[key], where)
        return out
    if path == ("optimization_groups",):
        a, b = {g["id"]: g for g in old}, {g["id"]: g for g in new}
        out = _diff(a, b, path)
        if not out and list(a) != list(b):
            out.append({"path": (*path, "(order)"), "old": list(a), "new": list(b)})
        return out
    return [] if old == new else [{"path": path, "old": old, "new": new}]


def _leaves(sign: str, path: tuple[str, ...], value: Any) -> list[tuple[str, str, str]]:
    """An added or removed subtree as one line per leaf: key paths and values, no JSON blobs."""
    if isinstance(value, dict) and value:
        return [line for k, v in value.items() for line in _leaves(sign, (*path, str(k)), v)]
    return [(sign, _key_path(path), _value(value))]


def _key_path(path: tuple[str, ...]) -> str:
    """``a.b[c.d]``: keys holding dots (group IDs, target paths) in brackets."""
    out = ""
    for key in path:
        out += f"[{key}]" if "." in key and out else f".{key}" if out else key
    return out


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value) or "[]"
    return json.dumps(value)


def report(args: argparse.Namespace) -> int:
    try:
        data = json.loads(Path(args.file).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{args.file}: not a readable JSON report: {err}") from None
    if args.json:
        render.emit_json(data)
    elif "processes" in data:
        render.run_report(data)
    elif "groups" in data and "summary" in data:
        render.report(data)
    else:
        raise ConfigError(f"{args.file}: neither a check/apply report nor a run report")
    return OK


def kernels(args: argparse.Namespace) -> int:
    need("torch", install="pip install 'turbo_physai[torch]'",
         purpose="every kernel slot's implementations are torch operators")
    from .. import kernels as registry

    active = registry.active()
    if args.json:
        render.emit_json(active)
    else:
        render.table("active kernels", ["slot", "implementation"], sorted(active.items()))
    return OK
