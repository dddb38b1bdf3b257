"""Replacements and wrapper factories specific to one model."""
