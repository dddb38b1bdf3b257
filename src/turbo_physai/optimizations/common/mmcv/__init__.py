"""Replacements for MMCV objects."""
