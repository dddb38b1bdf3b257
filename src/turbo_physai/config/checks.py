"""Per-group checks that come from the config itself rather than from the catalog.

- ``dependency.version``: ``compatibility.dependencies`` pins packages with PEP 440 specifiers.
  A mismatch blocks only the groups whose declarations touch that package (the distribution
  that provides the top-level module of a target), never every group. Overrideable by force.
- ``project.commit`` / ``project.dirty``: the git repository of the working directory is the
  model's. With ``compatibility.commits``, a HEAD outside the list is a warning (the target
  evidence decides). With ``allow_dirty: false``, uncommitted changes to tracked files fail
  (overrideable by force); ``true`` makes them a warning; without the key the tree is not
  judged (TurboPhysAI's rule). Both apply to every group.
- ``catalog.choice`` / ``catalog.duplicate``: for an ID several catalogs declare, which one the
  config named (a warning) or that it named none of them (fails, not overrideable); see
  :mod:`turbo_physai.engine.catalog`. These come also without a config.
"""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..engine import catalog
from ..engine.declarations import Group
from ..engine.report import FAIL, PASS, UNKNOWN, WARNING, Check
from .model import ConfigError, OptimizationConfig
from .schema import requirement

GroupChecks = Callable[[Group], list[Check]]


def gate(config: OptimizationConfig | None) -> GroupChecks:
    """Build the checks once per check/apply run; the result gives fresh Checks per group."""
    if config is None:
        return _declared_by
    pins = {
        canonicalize_name(name): _specs(name, specs)
        for name, specs in config.compatibility.get("dependencies", {}).items()
    }
    owners = _owners(tuple(sys.path)) if pins else {}
    project = _project(config.compatibility)

    def checks(group: Group) -> list[Check]:
        out = _declared_by(group) + [Check(**c) for c in project]
        for dist in distributions(group, owners):
            specs = pins.get(canonicalize_name(dist))
            if specs is not None:
                out.append(_version(dist, specs))
        return out

    return checks


def _declared_by(group: Group) -> list[Check]:
    choice = catalog.registry.choice(group.id)
    if choice is None:
        return []
    chosen, sources = choice
    if chosen is not None:
        others = ", ".join(s for s in sources if s != chosen)
        return [Check("catalog.choice", WARNING,
                      f"{chosen} (named in optimization_modules) is used; {others} also "
                      "declare(s) this ID", expected=list(sources), actual=chosen)]
    return [Check("catalog.duplicate", FAIL,
                  f"declared by {' and '.join(sources)}: name the catalog to use in the config's "
                  "optimization_modules", expected=list(sources), reason="catalog.duplicate")]


def distributions(group: Group, owners: dict[str, list[str]] | None = None) -> list[str]:
    """Installed distributions providing the top-level modules a group's declarations touch."""
    owners = _owners(tuple(sys.path)) if owners is None else owners
    found: list[str] = []
    for decl in group.declarations:
        path = getattr(decl, "target", None) or decl.module
        for dist in owners.get(path.split(".")[0], ()):
            if dist not in found:
                found.append(dist)
    return found


# Mapping modules to distributions reads every installed distribution's file list (about 0.5 s
# with a few hundred installed) and apply() asks on every call (A/B loops apply hundreds of
# times); the answer changes only with sys.path.
@functools.lru_cache(maxsize=8)
def _owners(path: tuple[str, ...]) -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _specs(name: str, specs: str | list[str]) -> list[SpecifierSet]:
    # Files were validated by the loader; programmatic configs are validated here.
    specs = [specs] if isinstance(specs, str) else list(specs)
    parsed = [requirement(s) if isinstance(s, str) else None for s in specs]
    if None in parsed or not parsed:
        raise ConfigError(
            f"compatibility.dependencies.{name}: {specs!r} are not versions or PEP 440 specifiers"
        )
    return parsed


def _version(dist: str, specs: list[SpecifierSet]) -> Check:
    installed = importlib.metadata.version(dist)
    try:
        ok = any(s.contains(Version(installed), prereleases=True) for s in specs)
    except InvalidVersion:
        ok = False
    wanted = [str(s) for s in specs]
    return Check(
        "dependency.version",
        PASS if ok else FAIL,
        f"{dist} {installed}" + ("" if ok else f" is outside {' or '.join(wanted)}"),
        expected=wanted,
        actual=installed,
        overrideable=True,
        reason=None if ok else "dependency.version",
    )


def _project(compat: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    commits = compat.get("commits")
    head = _git("rev-parse", "HEAD") if commits or "allow_dirty" in compat else None
    if commits:
        if head is None:
            out.append(dict(code="project.commit", status=UNKNOWN, expected=commits,
                            message="the working directory is not a git repository"))
        else:
            out.append(dict(
                code="project.commit",
                status=PASS if head in commits else WARNING,
                expected=commits,
                actual=head,
                message="" if head in commits else "HEAD is not a commit the config was made on",
            ))
    if "allow_dirty" not in compat:
        return out  # TurboPhysAI's rule: the tree is judged only when the config says how
    dirty = _git("status", "--porcelain", "--untracked-files=no") if head else None
    if head is None:
        out.append(dict(code="project.dirty", status=UNKNOWN,
                        message="the working directory is not a git repository"))
    elif dirty and not compat["allow_dirty"]:
        out.append(dict(
            code="project.dirty",
            status=FAIL,
            actual=dirty.splitlines()[:20],
            message="the model repository has uncommitted changes",
            overrideable=True,
            reason="project.dirty",
        ))
    else:
        out.append(dict(code="project.dirty", status=PASS if not dirty else WARNING,
                        message="allowed by allow_dirty" if dirty else ""))
    return out


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
