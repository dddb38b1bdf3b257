"""Wrap factory for ``bevformer.compile.encoder``: ``BEVFormerLayer.forward`` under
torch.compile, compiled on the first call. Options: see ``common/compile.py``."""

from __future__ import annotations

from ...common.compile import compile_wrapper

__all__ = ["compile_wrapper"]
