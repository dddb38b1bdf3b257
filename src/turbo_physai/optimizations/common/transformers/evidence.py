"""Which transformers releases an MSDA group accepts: those whose code it was validated against
(:mod:`..host_code`: fingerprints, table, messages, recording).

What is transformers' own: the **math markers** the op relies on (:func:`math_problems`:
bilinear sampling, zero padding, ``align_corners=False`` and values split per level by
``height * width``), the table ``validated.json`` beside this file (recorded across 4.46 to 5.24)
and how a release is validated: ``tools/compat_matrix.sh --record RELEASE`` runs the catalog
tests in a venv with that release, with ``TPA_VALIDATE_TRANSFORMERS=RELEASE``, and when they pass
records its fingerprints (``record``).
``python -m turbo_physai.optimizations.common.transformers.evidence row`` prints the docs table's
row for the installed release.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from .. import host_code


def math_problems(obj: Any) -> list[str]:
    """What the code no longer does of the math our op computes (empty: all of it)."""
    node = host_code.tree(obj)
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


EVIDENCE = host_code.Evidence(
    package="transformers",
    file=Path(__file__).with_name("validated.json"),
    validate="`tools/compat_matrix.sh --record {release}`",
    math=math_problems,
)


def _msda_groups():
    from ....catalogs import transformers as catalog

    return [g for g in catalog.GROUPS if g.id in catalog.MSDA_IDS]


def record() -> None:
    """Add the fingerprints of every MSDA target of the installed release to validated.json."""
    host_code.record(EVIDENCE, host_code.targets(_msda_groups()))


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
