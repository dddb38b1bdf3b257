"""Wrap factory for ``bevformer.compile.encoder``: ``BEVFormerLayer.forward`` under
torch.compile, compiled on the first call. Options: see ``common/compile.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...common.compile import lazy_compile


def compile_wrapper(original: Callable[..., Any], options: Mapping[str, Any]) -> Callable[..., Any]:
    """``original`` compiled lazily; keeps its name, doc, signature and ``__wrapped__``."""
    return lazy_compile(original, options)
