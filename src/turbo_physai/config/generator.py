"""Generate an OptimizationConfig from requested group IDs, with evidence from the code here.

Requested IDs -> dependency closure, import-compatibility groups first, stable order, and
conflicts, all from the C++ planner. Every replace/wrap target is resolved (its module is
imported) and hashed in TurboPhysAI's formats: ``source-v1``/``ast-v1`` for Python code (a
property's accessors together), ``artifact-v1`` for objects of compiled extensions, else our
``native-v1`` (see engine/evidence.py). The installed versions of the packages the groups
touch are recorded as ``compatibility.dependencies``, checked later with PEP 440 specifiers.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .. import _core
from ..engine.catalog import planner_node, registry
from ..engine.declarations import Group
from ..engine.evidence import record
from ..engine.paths import ResolutionError, resolve
from ..engine.report import write_atomic
from .checks import distributions
from .model import ConfigError, GroupSelection, OptimizationConfig, Trust

Progress = Callable[[int, int, str], None]


class GenerateError(ConfigError):
    """The requested groups cannot make a config here (unknown ID, cycle, conflict, target)."""


def generate(
    ids: Sequence[str],
    *,
    metadata: Mapping[str, str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
    base: OptimizationConfig | None = None,
    trust: bool = False,
    progress: Progress | None = None,
) -> OptimizationConfig:
    """``base`` (a recipe) contributes model, compatibility and catalogs; its own
    ``dependencies`` pins win over the recorded installed versions."""
    from ..catalogs import discovery

    discovery.load(base.catalogs if base else (), trust=trust)
    catalog = registry.groups()
    try:
        plan = _core.plan_groups([planner_node(g) for g in catalog], list(ids))
    except _core.PlanError as err:
        raise GenerateError(str(err)) from None
    if plan.conflicts:
        raise GenerateError(
            "conflicting groups: "
            + "; ".join(
                f"{c.first!r} and {c.second!r} both write {c.path!r}" for c in plan.conflicts
            )
        )
    options = options or {}
    selections, versions, sources = [], {}, []
    for i, gid in enumerate(plan.order):
        if progress:
            progress(i, len(plan.order), gid)
        group = registry.get(gid)
        selections.append(GroupSelection(gid, True, dict(options.get(gid, {})), evidence(group)))
        for dist in distributions(group):
            versions[dist] = [importlib.metadata.version(dist)]
        if group.source not in sources:
            sources.append(group.source)
    compat = dict(base.compatibility) if base else {}
    pinned = {**versions, **compat.get("dependencies", {})}
    if pinned:
        compat["dependencies"] = dict(sorted(pinned.items()))
    catalogs = list(base.catalogs) if base else []
    catalogs += [s for s in sources if s not in catalogs and not s.startswith("<")]
    return OptimizationConfig(
        tuple(selections),
        dict(metadata),
        dict(base.model or {}) if base else None,
        compat,
        catalogs=tuple(catalogs),
    )


def evidence(group: Group) -> Trust:
    """Hashes of every replace/wrap target of ``group`` as it is installed here, and of the code
    a replace_stored relies on (the function, the ``__init__`` storing it, its callers)."""
    source: dict[str, tuple[str, ...]] = {}
    tree: dict[str, tuple[str, ...]] = {}
    for decl in group.declarations:
        if decl.kind in ("replace", "wrap"):
            paths, optional = (decl.target,), decl.optional
        elif decl.kind == "replace_stored":  # the code it relies on; its target is a new name
            paths, optional = (*decl.replaces, *decl.reads), False
        else:
            continue  # import-compatibility targets may not even be importable: no hash
        for path in paths:
            try:
                location = resolve(path)
            except ResolutionError as err:
                if optional:  # a target this release lacks: nothing here to vouch for
                    continue
                raise GenerateError(f"group {group.id!r}: target {path!r}: {err}") from None
            src, ast_ = record(location.found)
            source[path] = tuple(src)
            if ast_:
                tree[path] = tuple(ast_)
    return Trust(source, tree)


def write(
    config: OptimizationConfig,
    path: str | os.PathLike[str],
    *,
    force: bool = False,
    header: str = "",
) -> None:
    """Write YAML atomically; an existing file is replaced only with ``force``."""
    if Path(path).exists() and not force:
        raise FileExistsError(f"{path} exists; pass --force to overwrite it")
    text = yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True, width=100)
    write_atomic(path, (f"# {header}\n" if header else "") + text)
