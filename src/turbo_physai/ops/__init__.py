"""Torch operators of turbo_physai (``torch.ops.turbo_physai.*``); importing one needs torch."""
