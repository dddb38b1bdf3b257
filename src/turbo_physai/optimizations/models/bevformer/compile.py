"""Wrap factory of the BEVFormer compile groups (``bevformer.compile.encoder``/``.decoder``,
``bevformer.compile``) and of ``bevformer.mdc``'s image backbone: the target compiled on its
first call. Options: see ``common/compile.py``."""

from __future__ import annotations

from ...common.compile import compile_wrapper

__all__ = ["compile_wrapper"]
