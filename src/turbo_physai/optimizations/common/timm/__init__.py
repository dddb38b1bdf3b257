"""Replacements for timm objects."""
