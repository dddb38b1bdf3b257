"""Operators of turbo_physai: torch.library custom ops with fake implementations and autograd.

Importing this package imports torch (the top-level ``turbo_physai`` package does not).
"""

from turbo_physai.ops.ms_deform_attn import ms_deform_attn, ms_deform_attn_reference

__all__ = ["ms_deform_attn", "ms_deform_attn_reference"]
