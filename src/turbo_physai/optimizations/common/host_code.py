"""Compatibility by evidence: a group that replaces a host library's code applies where that
code is code it was validated against, whatever the release.

The evidence is the code itself, not a version number:

- the **fingerprint** of each path checked (:func:`fingerprint`: sha256 of the normalized AST;
  docstrings, comments, formatting and type annotations do not count; names, the signature with
  its defaults and every statement do). An :class:`Evidence`'s JSON table maps each fingerprint
  the catalog tests passed on to the releases they ran on. A release whose code has only such
  fingerprints is accepted; one that changed the code is blocked even within a series.
- optionally, **math markers** (``Evidence.math``): what the replaced code must still do for our
  op to compute the same. An unvalidated fingerprint is blocked either way; the markers say in
  the reason what changed when one of them did.

The paths checked are the group's targets and the code its declarations rely on
(``context.reads``; one that does not resolve is left to preparation's ``target.unresolved``),
and ``Evidence.relies_on``, code the replacement relies on without replacing it (missing:
blocked). Math markers apply to targets and ``relies_on``, not to reads. A block names the
installed release, the path, its fingerprint and how to validate it: run the catalog tests on
that release with ``TPA_VALIDATE_<PACKAGE>=RELEASE`` (new code of that release is let through,
if its math markers are there), then :func:`record` its fingerprints into the table.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import inspect
import json
import sys
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...engine.context import CompatibilityResult
from ...engine.evidence import _canonical
from ...engine.paths import ResolutionError, installed_by_us, resolve, unwrap_descriptor

#: The fingerprint format, part of every recorded fingerprint: named after the groups that
#: first recorded it (transformers' MSDA, across 4.46 to 5.24), kept so those records stay valid.
FORMAT = "msda-ast-v1"


@dataclass(frozen=True)
class Evidence:
    package: str  #: the distribution (its release is named in the messages)
    file: Path  #: the JSON table: {"format": FORMAT, "fingerprints": {fp: {code, releases}}}
    validate: str  #: how to validate a release, ``{release}`` filled in (named when blocking)
    relies_on: tuple[str, ...] = ()  #: code not replaced that must be validated code too
    #: what the code no longer does of our op's math (empty: all of it), for the block reason
    math: Callable[[Any], list[str]] | None = None

    @property
    def env(self) -> str:
        """The environment variable naming the release whose tests run to validate it."""
        return "TPA_VALIDATE_" + self.package.upper().replace("-", "_")


def validated(evidence: Evidence) -> dict[str, dict[str, Any]]:
    """fingerprint -> {"code": what it is, "releases": [...]}: the code the tests passed on."""
    file = evidence.file
    return _load(file, file.stat().st_mtime_ns) if file.exists() else {}


@functools.lru_cache(maxsize=8)
def _load(file: Path, _mtime: int) -> dict[str, dict[str, Any]]:
    data = json.loads(file.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{file}: format {data.get('format')!r}, expected {FORMAT!r}")
    return data["fingerprints"]


def tree(obj: Any) -> ast.AST | None:
    """The normalized AST of a function's source (None without source)."""
    try:
        source = inspect.getsource(unwrap_descriptor(obj))
    except (OSError, TypeError):
        return None
    node = ast.parse(textwrap.dedent(source))
    for sub in ast.walk(node):
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
            body = sub.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                sub.body = body[1:] or [ast.Pass()]  # the docstring
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
            sub.returns = None
        if isinstance(sub, ast.arg):
            sub.annotation = None
    return node


def fingerprint(obj: Any) -> str | None:
    """``msda-ast-v1:<sha256>`` of the normalized AST, None for an object without source."""
    node = tree(obj)
    if node is None:
        return None
    return f"{FORMAT}:{hashlib.sha256(_canonical(node).encode()).hexdigest()}"


def judge(
    evidence: Evidence,
    path: str,
    release: str,
    validating: str | None = None,
    required=False,
    math=True,
) -> tuple[str | None, list[str]]:
    """(why the code at ``path`` is not validated or None, the releases its code was validated
    on). Code that does not resolve passes unless ``required`` (a target's is reported by
    preparation as target.unresolved); so does our own replacement (applied now: the code it
    replaced was judged then). ``validating``: the release whose tests run to validate it, whose
    new code passes if its math markers are there (``math``: code our op takes over; other code
    relied on has none to check)."""
    head = f"{evidence.package} {release}"
    how = evidence.validate.format(release=release)
    try:
        obj = resolve(path).found
    except ResolutionError as err:
        return (f"{head}: {path} is missing ({err}); validate it: {how}" if required else None), []
    if installed_by_us(obj):
        return None, []
    fp = fingerprint(obj)
    known = validated(evidence)
    if fp in known:
        return None, known[fp]["releases"]
    markers = evidence.math if math else None
    problems = markers(obj) if markers is not None else []
    if validating is not None and validating == release and not problems:
        return None, []
    what = f"fingerprint {fp}"
    if problems:
        what += f"; it no longer does what our op computes: {'; '.join(problems)}"
    elif markers is not None:
        what += "; its math markers are there, but no test ran on this code"
    return f"{head}: the code of {path} is not a validated version ({what}); validate it: {how}", []


def check(context, evidence: Evidence) -> CompatibilityResult:
    """The compatibility_check body: the code at every target and at ``relies_on`` is validated."""
    installed = context.package_version(evidence.package)
    releases = sorted({r for e in validated(evidence).values() for r in e["releases"]}, key=_key)
    expected = f"code validated on {evidence.package} {', '.join(releases)}"
    if installed is None:  # the unresolvable target says more (target.unresolved)
        return CompatibilityResult(True, expected, None, f"{evidence.package} is not installed")
    validating = context.environment.get(evidence.env)
    # (path, required, math): a target or read that does not resolve is preparation's to
    # report (target.unresolved); math markers apply to the code whose work our op takes over
    paths = [
        *((t.path, False, True) for t in context.targets),
        *((p, False, False) for p in context.reads),
        *((p, True, True) for p in evidence.relies_on),
    ]
    matched: set[str] = set()
    for path, required, math in paths:
        reason, on = judge(evidence, path, installed, validating, required, math)
        if reason is not None:
            return CompatibilityResult(False, expected, installed, reason)
        matched.update(on)
    on = ", ".join(sorted(matched, key=_key)) or "this release, being validated or applied"
    return CompatibilityResult(
        True, expected, installed, f"{evidence.package} {installed}: the code validated on {on}"
    )


def record(evidence: Evidence, paths: Iterable[str]) -> None:
    """Add the fingerprints of the code at ``paths`` (and ``relies_on``) on the installed release
    to the table; run after the catalog tests passed on it."""
    release = importlib.metadata.version(evidence.package)
    table = dict(validated(evidence))
    for path in dict.fromkeys([*paths, *evidence.relies_on]):
        try:
            obj = resolve(path).found
        except ResolutionError:
            continue  # a target this release lacks (an optional one, or another model's)
        entry = table.setdefault(fingerprint(obj), {"code": _code_name(path), "releases": []})
        entry["releases"] = sorted(set(entry["releases"]) | {release}, key=_key)
    table = dict(sorted(table.items(), key=lambda kv: (kv[1]["code"], _key(kv[1]["releases"][0]))))
    data = {"format": FORMAT, "fingerprints": table}
    evidence.file.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    _load.cache_clear()  # a write within the clock's tick keeps the file's mtime
    print(f"recorded {evidence.package} {release} in {evidence.file}")


def targets(groups) -> list[str]:
    """The targets of ``groups`` and the code they rely on (what :func:`record` records)."""
    return [
        path
        for group in groups
        for decl in group.declarations
        for path in (decl.target, *getattr(decl, "replaces", ()), *getattr(decl, "reads", ()))
    ]


def main(evidence: Evidence, groups, argv: list[str]) -> None:
    """``python -m <a catalog's evidence module> record``: :func:`record` its groups' targets."""
    if argv != ["record"]:
        sys.exit(f"usage: python -m <module> record (records {evidence.package}'s fingerprints)")
    record(evidence, targets(groups))


def _code_name(path: str) -> str:
    parts = path.split(".")
    return ".".join(parts[-2:]) if parts[-1] in ("forward", "__init__") else parts[-1]


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in release.split("."))
