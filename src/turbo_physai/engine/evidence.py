"""Source evidence: hashes that tie a config to the exact code it was generated against.

The formats are TurboPhysAI's (its ``engine/checking/evidence.py``), so its configs verify here
unchanged, plus one of ours:

``source-v1:``
    sha256 of the UTF-8 source text as ``inspect.getsource`` returns it (methods keep their
    indentation). A property is one text: for each of fget/fset/fdel present, the line
    ``__turbo_physai_property_accessor__ = 'fget'`` then the accessor's dedented source,
    joined with newlines. A module is its ``.py`` file's text.
``ast-v1:``
    sha256 of the canonical dump of ``ast.parse(dedent(source))``: ``Name(field=...,...)`` with
    the fields that are neither None nor empty lists, lists as ``[a,b]``, leaves as ``repr``;
    positions are not fields, so reformatting and comments do not matter.
``artifact-v1:``
    sha256 of the bytes of the compiled extension (``.so``/``.pyd``/``.dylib``/``.dll``)
    that defines an object without Python source.
``native-v1:`` (ours)
    for an object without source outside an extension file (a builtin bound into a ``.py``
    module): sha256 of its module file's bytes, a NUL byte and its qualified name.

A check compares by value: a target passes when one of the hashes recorded for it is one of
the hashes its current object has. A recorded hash of these formats that matches nothing
(``source-v1:stale``, a placeholder, code that changed) is a mismatch. A recorded hash of any
other format cannot be computed here and is reported as unverifiable, never guessed.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

from .paths import unwrap_descriptor
from .report import FAIL, NOT_APPLICABLE, PASS, UNKNOWN, Check

#: The formats this module computes; any other recorded format is unverifiable.
FORMATS = ("source-v1", "ast-v1", "artifact-v1", "native-v1")
_EXTENSIONS = {".so", ".pyd", ".dylib", ".dll"}
_FORMAT = re.compile(r"^([a-z][a-z0-9_]*-v[0-9]+):")


def _sha(prefix: str, data: str | bytes) -> str:
    data = data.encode("utf-8") if isinstance(data, str) else data
    return f"{prefix}:{hashlib.sha256(data).hexdigest()}"


def identity(raw: Any) -> dict[str, str]:
    """The hashes of the object found at a target (raw ``__dict__`` value), by format:
    source-v1 and ast-v1 for Python code, else artifact-v1 and/or native-v1."""
    obj = raw if isinstance(raw, property) else unwrap_descriptor(raw)
    source = _source(obj)
    if source is not None:
        out = {"source-v1": _sha("source-v1", source)}
        tree = _canonical_tree(source)
        if tree is not None:
            out["ast-v1"] = _sha("ast-v1", tree)
        return out
    out = {}
    artifact = _artifact(obj)
    if artifact is not None:
        out["artifact-v1"] = _sha("artifact-v1", artifact)
    if not isinstance(obj, property):
        out["native-v1"] = fingerprint(obj)
    return out


def recorded(source_hashes: Any, ast_hashes: Any) -> tuple[str, ...]:
    """The hashes a config records for one target (either list, order kept, no repeats)."""
    return tuple(dict.fromkeys([*source_hashes, *ast_hashes]))


def verify(target: str, raw: Any, accepted: tuple[str, ...]) -> Check:
    """``source.identity`` of one target against the hashes recorded for it."""
    if not accepted:
        return Check("source.identity", NOT_APPLICABLE, f"{target}: no evidence recorded")
    current = identity(raw)
    if set(accepted) & set(current.values()):
        return Check("source.identity", PASS, target, actual=current)
    known = [h for h in accepted if _format(h) in FORMATS]
    unverifiable = [h for h in accepted if _format(h) not in FORMATS]
    if not known:
        formats = sorted({_format(h) or repr(h[:20]) for h in unverifiable})
        return Check(
            "source.identity",
            UNKNOWN,
            f"{target}: recorded evidence cannot be verified here: {', '.join(formats)} "
            f"{'is' if len(formats) == 1 else 'are'} not a hash format turbo_physai computes "
            f"({', '.join(FORMATS)})",
            expected=list(accepted),
            actual=current,
        )
    note = f" ({len(unverifiable)} recorded hash(es) of other formats not verifiable)"
    return Check(
        "source.identity",
        FAIL,
        f"{target} changed since the config was generated: none of its recorded hashes "
        f"matches" + (note if unverifiable else ""),
        expected=list(accepted),
        actual=current,
        overrideable=True,
        reason="source.identity",
    )


def record(raw: Any) -> tuple[list[str], list[str]]:
    """What ``generate`` writes for a target: (source_hashes, ast_hashes). Python code gets
    source-v1 and ast-v1; an object without source its artifact-v1 if it comes from a compiled
    extension (TurboPhysAI's choice), else native-v1."""
    current = identity(raw)
    if "source-v1" in current:
        return [current["source-v1"]], [current[k] for k in ("ast-v1",) if k in current]
    kind = "artifact-v1" if "artifact-v1" in current else "native-v1"
    return ([current[kind]] if kind in current else []), []


def fingerprint(obj: Any) -> str:
    """``native-v1``: the defining module's file bytes + the object's qualified name."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(type(obj))
    file = getattr(module, "__file__", None)
    try:
        blob = Path(file).read_bytes() if file else b""
    except OSError:
        blob = b""
    return _sha("native-v1", blob + b"\0" + str(name).encode())


def _format(value: str) -> str | None:
    match = _FORMAT.match(value)
    return match.group(1) if match else None


def _source(obj: Any) -> str | None:
    if isinstance(obj, property):
        parts = []
        for name in ("fget", "fset", "fdel"):
            accessor = getattr(obj, name)
            if accessor is None:
                continue
            text = _getsource(accessor)
            if text is None:
                return None
            parts.append(f"__turbo_physai_property_accessor__ = {name!r}\n{textwrap.dedent(text)}")
        return "\n".join(parts) if parts else None
    if isinstance(obj, ModuleType):
        file = getattr(obj, "__file__", None)
        if file and Path(file).suffix.lower() in {".py", ".pyw"}:
            try:
                return Path(file).read_text(encoding="utf-8")
            except (OSError, UnicodeError):
                return None
    return _getsource(obj)


def _getsource(obj: Any) -> str | None:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None
    except Exception:  # noqa: BLE001 (a broken __wrapped__ chain or loader: no source)
        return None


def _canonical_tree(source: str) -> str | None:
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _canonical(tree)


def _canonical(node: Any) -> str:
    if isinstance(node, ast.AST):
        fields = [
            f"{name}={_canonical(value)}"
            for name, value in ast.iter_fields(node)
            if value is not None and value != []
        ]
        return f"{type(node).__name__}({','.join(fields)})"
    if isinstance(node, list):
        return "[" + ",".join(_canonical(item) for item in node) + "]"
    return repr(node)


def _artifact(obj: Any) -> bytes | None:
    try:
        module = inspect.getmodule(obj)
    except Exception:  # noqa: BLE001 (getmodule walks sys.modules; a broken module: none)
        return None
    file = getattr(module, "__file__", None)
    if not file or Path(file).suffix.lower() not in _EXTENSIONS:
        return None
    try:
        return Path(file).read_bytes()
    except OSError:
        return None
