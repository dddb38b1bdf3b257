"""Which transformers releases an MSDA group accepts: those whose code it was validated against.

A group replaces transformers' grid_sample implementation of multi-scale deformable attention
with our op. That is exact only while the replaced code computes what the op computes, so the
evidence is the code itself, not a version number:

- the **fingerprint** of each target: sha256 of its normalized AST (see :func:`fingerprint`:
  docstrings, comments, formatting and type annotations do not count; names, the signature with
  its defaults and every statement do). ``validated.json`` beside this file maps each fingerprint
  the catalog tests passed on to the releases they ran on; a release whose code has only such
  fingerprints is accepted, whatever its version.
- the **math** the op relies on (:func:`math_problems`): bilinear sampling, zero padding,
  ``align_corners=False`` and values split per level by ``height * width``. An unvalidated
  fingerprint is blocked either way; this says what changed when one of those did.

Validating a release: ``tools/compat_matrix.sh --record RELEASE`` runs the catalog tests in a
venv with that release, with ``TPA_VALIDATE_TRANSFORMERS=RELEASE`` (new code of that release only
is let through, if its math markers are there), and when they pass records its fingerprints
here (``record``).
``python -m turbo_physai.optimizations.common.transformers.evidence row`` prints the docs table's
row for the installed release.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import textwrap
from pathlib import Path
from typing import Any

from ....engine.evidence import _canonical
from ....engine.paths import ResolutionError, resolve, unwrap_descriptor

FORMAT = "msda-ast-v1"
VALIDATED_FILE = Path(__file__).with_name("validated.json")
#: How to validate a release whose code is new (named in every block reason).
VALIDATE = "tools/compat_matrix.sh --record {release}"


def validated() -> dict[str, dict[str, Any]]:
    """fingerprint -> {"code": what it is, "releases": [...]}: the code the tests passed on."""
    return _load(VALIDATED_FILE.stat().st_mtime_ns) if VALIDATED_FILE.exists() else {}


@functools.lru_cache(maxsize=2)
def _load(_mtime: int) -> dict[str, dict[str, Any]]:
    data = json.loads(VALIDATED_FILE.read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{VALIDATED_FILE}: format {data.get('format')!r}, expected {FORMAT!r}")
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


def math_problems(obj: Any) -> list[str]:
    """What the code no longer does of the math our op computes (empty: all of it)."""
    node = tree(obj)
    if node is None:
        return ["no source to read"]
    problems = []
    samples = [c for c in ast.walk(node) if _called(c) == "grid_sample"]
    want = {"mode": "bilinear", "padding_mode": "zeros", "align_corners": False}
    for name, value in want.items():
        if not samples or not all(_keyword(c, name) == value for c in samples):
            problems.append(f"grid_sample {name}={value!r}")
    if not any(_splits_per_level(c) for c in ast.walk(node)):
        problems.append("values split per level by height * width")
    return problems


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return None


def _keyword(call: ast.Call, name: str) -> Any:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def _splits_per_level(node: ast.AST) -> bool:
    """``x.split([height * width for height, width in shapes], ...)``."""
    if _called(node) != "split" or not node.args or not isinstance(node.args[0], ast.ListComp):
        return False
    comp = node.args[0]
    elt, target = comp.elt, comp.generators[0].target
    names = [n.id for n in getattr(target, "elts", []) if isinstance(n, ast.Name)]
    return (
        isinstance(elt, ast.BinOp)
        and isinstance(elt.op, ast.Mult)
        and len(names) == 2
        and {getattr(elt.left, "id", None), getattr(elt.right, "id", None)} == set(names)
    )


def judge(path: str, release: str | None, validating: str | None = None) -> str | None:
    """Why the code at ``path`` is not validated (None: it is, or it does not resolve, which
    preparation reports as target.unresolved). ``validating``: the release whose tests are
    running to validate it (``$TPA_VALIDATE_TRANSFORMERS``), whose new code passes if it still
    does our op's math."""
    try:
        obj = resolve(path).found
    except ResolutionError:
        return None
    if _ours(obj):  # applied now: the code it replaced was judged then
        return None
    fp = fingerprint(obj)
    if fp in validated():
        return None
    problems = math_problems(obj)
    if validating is not None and validating == release and not problems:
        return None
    what = (
        f"and it no longer does what our op computes ({'; '.join(problems)})"
        if problems
        else "(its math markers are there, but no test ran on this code)"
    )
    return (
        f"transformers {release}: {path} is code no validated release has (fingerprint "
        f"{fp}) {what}; validate it with `{VALIDATE.format(release=release)}`"
    )


def _ours(obj: Any) -> bool:
    """A turbo_physai replacement or its runtime-condition dispatcher (``_core.Dispatcher``)."""
    obj = unwrap_descriptor(obj)
    return any(
        (getattr(x, "__module__", None) or "").startswith("turbo_physai.") for x in (obj, type(obj))
    )


def _msda_groups():
    from ....catalogs import transformers as catalog

    return [g for g in catalog.GROUPS if g.id in catalog.MSDA_IDS]


def record() -> None:
    """Add the fingerprints of every MSDA target of the installed release to validated.json."""
    import importlib.metadata

    release = importlib.metadata.version("transformers")
    data = {"format": FORMAT, "fingerprints": dict(validated())}
    for group in _msda_groups():
        for decl in group.declarations:
            try:
                obj = resolve(decl.target).found
            except ResolutionError:
                continue
            entry = data["fingerprints"].setdefault(
                fingerprint(obj), {"code": _code_name(decl.target), "releases": []}
            )
            entry["releases"] = sorted(set(entry["releases"]) | {release}, key=_version_key)
    data["fingerprints"] = dict(
        sorted(data["fingerprints"].items(), key=lambda kv: (kv[1]["code"], kv[1]["releases"][0]))
    )
    VALIDATED_FILE.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"recorded transformers {release} in {VALIDATED_FILE}")


def _code_name(path: str) -> str:
    parts = path.split(".")
    return ".".join(parts[-2:]) if parts[-1] == "forward" else parts[-1]


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in release.split("."))


def accepted() -> tuple[list[str], list[str]]:
    """(accepted group ids, all group ids) of the transformers catalog on the installed release."""
    import turbo_physai as tpa

    from ....catalogs import transformers as catalog

    ids = [g.id for g in catalog.GROUPS]
    report = tpa.check(groups=ids)
    return [g.id for g in report.groups if g.decision == "apply"], ids


def row() -> str:
    """The docs table's row for the installed release: release, models reached, groups."""
    import importlib.metadata

    ok, ids = accepted()
    msda = set(ok) & {g.id for g in _msda_groups()}
    models = sorted({gid.split(".")[1] for gid in msda})
    return (
        f"| {importlib.metadata.version('transformers')} | {len(models)}: "
        f"{', '.join(models)} | {len(ok)} of {len(ids)}"
    )


if __name__ == "__main__":
    import sys

    commands = {"record": record, "row": lambda: print(row())}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: python -m {__spec__.name} {'|'.join(commands)}")
    commands[sys.argv[1]]()
