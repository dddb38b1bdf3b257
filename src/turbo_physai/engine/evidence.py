"""Source evidence: hashes that tie a config to the exact code it was generated against.

``source-v1:`` hashes the source text; ``ast-v1:`` hashes the AST dump without positions, so
reformatting and comments do not matter. Objects without Python source (extension functions)
get ``native-v1:``, a hash of their module's file and qualified name.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

from .paths import unwrap_descriptor


def _sha(prefix: str, text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return f"{prefix}:{hashlib.sha256(data).hexdigest()}"


def accessors(raw: Any) -> list[tuple[str, Any]]:
    """The objects whose code makes up a target: a property's fget/fset/fdel, else the object."""
    if isinstance(raw, property):
        return [(n, getattr(raw, n)) for n in ("fget", "fset", "fdel") if getattr(raw, n)]
    return [("", unwrap_descriptor(raw))]


def hashes(obj: Any) -> tuple[str, str]:
    """(source hash, ast hash) of one object; both fall back to the native fingerprint."""
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        native = fingerprint(obj)
        return native, native
    tree = ast.dump(ast.parse(source), annotate_fields=True, include_attributes=False)
    return _sha("source-v1", source), _sha("ast-v1", tree)


def fingerprint(obj: Any) -> str:
    """Stable identity of an object without Python source: its module file bytes + name."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(type(obj))
    file = getattr(module, "__file__", None)
    blob = Path(file).read_bytes() if file and Path(file).is_file() else b""
    return _sha("native-v1", blob + b"\0" + str(name).encode())
