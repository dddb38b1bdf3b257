"""Operators of turbo_physai: torch.library custom ops with fake implementations and autograd.

Importing this package imports torch (the top-level ``turbo_physai`` package does not).
"""

from turbo_physai.ops.linear_sum_assignment import linear_sum_assignment
from turbo_physai.ops.ms_deform_attn import ms_deform_attn, ms_deform_attn_reference

__all__ = ["linear_sum_assignment", "ms_deform_attn", "ms_deform_attn_reference"]
